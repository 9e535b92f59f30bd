//! What is profiled: a model, a batch size, an optimizer and seeds, instantiated on any device
//! inside whatever tracker is current, so that parameters, buffers, optimizer state and the
//! batch are all accounted for.

use crate::Result;
use crate::error::ProfilerError;
use memopt_checkpoint::optim::{Adam, Optimizer, Sgd};
use memopt_checkpoint::{Batch, InputSpec, Model, Plan, StepOptions, StepOutput, Target, Trainer, zoo};
use memopt_compress::CompressorKind;
use memopt_core::kernels::{AdamConfig, SgdConfig};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Philox, Shape, Tensor};
use std::sync::Arc;

/// Builds a model on a device from a parameter seed.
pub type ModelBuilder = Arc<dyn Fn(Device, u64) -> memopt_checkpoint::Result<Model> + Send + Sync>;

/// Where the model comes from.
#[derive(Clone)]
pub enum ModelSource {
    /// A zoo model by name, with its input spec.
    Zoo {
        /// Zoo name, e.g. `cifar10dvs-vgg`.
        name: String,
        /// Time steps, sample shape and classes.
        spec: InputSpec,
    },
    /// Any model, from a builder that must allocate identically on every device.
    Custom {
        /// Name for reports.
        name: String,
        /// The builder.
        build: ModelBuilder,
    },
}

impl std::fmt::Debug for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Zoo { name, spec } => f
                .debug_struct("Zoo")
                .field("name", name)
                .field("spec", spec)
                .finish(),
            ModelSource::Custom { name, .. } => f.debug_struct("Custom").field("name", name).finish(),
        }
    }
}

/// The optimizer of the step (its state is part of the memory).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimizerChoice {
    /// SGD (with a momentum buffer per parameter when momentum is not 0).
    Sgd(SgdConfig),
    /// Adam (two moment buffers per parameter).
    Adam(AdamConfig),
}

impl OptimizerChoice {
    /// SGD with momentum 0.9, learning rate 0.1, no weight decay (one state buffer per
    /// parameter, as in SpikingJelly's examples).
    pub fn sgd_momentum() -> Self {
        OptimizerChoice::Sgd(SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        })
    }

    /// Adam with PyTorch's defaults (lr 1e-3).
    pub fn adam() -> Self {
        OptimizerChoice::Adam(AdamConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        })
    }

    /// `sgd` or `adam`.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerChoice::Sgd(_) => "sgd",
            OptimizerChoice::Adam(_) => "adam",
        }
    }

    fn build(&self, model: &Model) -> Result<Box<dyn Optimizer>> {
        Ok(match self {
            OptimizerChoice::Sgd(cfg) => Box::new(Sgd::new(model, *cfg)?),
            OptimizerChoice::Adam(cfg) => Box::new(Adam::new(model, *cfg)?),
        })
    }
}

/// One training step to profile: a model, a batch size, an optimizer and seeds. The same
/// workload instantiated on the CPU and on Meta allocates the same buffers in the same order.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The model.
    pub model: ModelSource,
    /// Samples per batch (N).
    pub batch_size: usize,
    /// The optimizer.
    pub optimizer: OptimizerChoice,
    /// Seed of the parameters and of the trainer's random stream (dropout).
    pub seed: u64,
    /// Seed of the random batch (spikes with probability 0.3, labels).
    pub data_seed: u64,
    /// The hardware whose allocations Meta steps of this workload reproduce (estimates and
    /// plans): the CPU by default, or a CUDA GPU, which needs no GPU to plan for.
    pub target: memopt_core::Target,
}

impl Workload {
    /// Zoo model `name` with `spec`, batches of `batch_size`, SGD with momentum, seeds 0.
    pub fn zoo(name: &str, spec: InputSpec, batch_size: usize) -> Self {
        Workload {
            model: ModelSource::Zoo {
                name: name.to_string(),
                spec,
            },
            batch_size,
            optimizer: OptimizerChoice::sgd_momentum(),
            seed: 0,
            data_seed: 0,
            target: memopt_core::Target::Cpu,
        }
    }

    /// Zoo model `name` at its small input size ([`zoo::ZooEntry::small`]: e.g. the VGG at
    /// T=4 on 2x48x48 samples, the ResNets at T=2 on 3x32x32), `batch_size` samples a batch.
    pub fn zoo_small(name: &str, batch_size: usize) -> Result<Self> {
        Ok(Self::zoo(name, zoo::entry(name)?.small, batch_size))
    }

    /// Zoo model `name` at the input size of its published workload (see
    /// [`zoo::ZooEntry::published`]; the CLI's `--published`).
    pub fn zoo_published(name: &str, batch_size: usize) -> Result<Self> {
        Ok(Self::zoo(name, zoo::entry(name)?.published, batch_size))
    }

    /// A custom model from `build(device, seed)`.
    pub fn custom(
        name: &str,
        build: impl Fn(Device, u64) -> memopt_checkpoint::Result<Model> + Send + Sync + 'static,
        batch_size: usize,
    ) -> Self {
        Workload {
            model: ModelSource::Custom {
                name: name.to_string(),
                build: Arc::new(build),
            },
            batch_size,
            optimizer: OptimizerChoice::sgd_momentum(),
            seed: 0,
            data_seed: 0,
            target: memopt_core::Target::Cpu,
        }
    }

    /// The same workload with another optimizer.
    pub fn with_optimizer(mut self, optimizer: OptimizerChoice) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        match &self.model {
            ModelSource::Zoo { name, .. } | ModelSource::Custom { name, .. } => name,
        }
    }

    /// One line for reports: model, input and optimizer, e.g.
    /// `cifar10dvs-vgg T=4 N=2 [2, 48, 48] sgd`.
    pub fn describe(&self) -> String {
        match &self.model {
            ModelSource::Zoo { name, spec } => format!(
                "{name} T={} N={} {:?} {}",
                spec.time_steps,
                self.batch_size,
                spec.sample,
                self.optimizer.name()
            ),
            ModelSource::Custom { name, .. } => {
                // The spec lives in the built model: build it on Meta (no data) in a scratch
                // tracker, so that nothing is recorded on the caller's.
                let spec = {
                    let _scratch = MemoryTracker::install(MemoryTracker::new(Device::META));
                    self.build_model(Device::META).map(|m| m.spec().clone())
                };
                match spec {
                    Ok(spec) => format!(
                        "{name} T={} N={} {:?} {}",
                        spec.time_steps,
                        self.batch_size,
                        spec.sample,
                        self.optimizer.name()
                    ),
                    Err(_) => format!("{name} N={} {}", self.batch_size, self.optimizer.name()),
                }
            }
        }
    }

    /// The Meta device that estimates this workload: it allocates as [`Workload::target`] does.
    pub fn meta_device(&self) -> Device {
        Device::Meta(self.target)
    }

    /// Builds the model on `device` (parameters allocated on the current tracker).
    pub fn build_model(&self, device: Device) -> Result<Model> {
        Ok(match &self.model {
            ModelSource::Zoo { name, spec } => zoo::build(name, spec, device, self.seed)?,
            ModelSource::Custom { build, .. } => build(device, self.seed)?,
        })
    }

    /// Builds everything a step needs on `device`, in a fixed order (model, plan, optimizer
    /// state, batch), so that every buffer is recorded by the tracker current on this thread.
    pub fn instantiate(&self, device: Device, plan: &Plan) -> Result<StepSession> {
        if self.batch_size == 0 {
            return Err(ProfilerError::Invalid("the batch size must be at least 1".into()));
        }
        let mut model = self.build_model(device)?;
        model.apply_plan(plan)?;
        let trainer = Trainer::new(self.optimizer.build(&model)?, self.seed);
        let batch = random_batch(&model, self.batch_size, self.data_seed)?;
        Ok(StepSession {
            model,
            trainer,
            batch,
        })
    }
}

/// A random batch of `n` for `model`: inputs 0 or 1 (probability 0.3), carrying the spike flag
/// when the model declares spike input ([`Model::spike_input`]), labels spread over the
/// classes. On Meta the same shapes without data: no host memory is touched, whatever the size.
pub fn random_batch(model: &Model, n: usize, seed: u64) -> Result<Batch> {
    let device = model.device();
    let dims = model.spec().input_dims(n);
    let input = if device.is_meta() {
        Tensor::zeros(dims, DType::F32, device, MemoryKind::Input)?
    } else {
        let count = Shape::new(dims.clone()).elem_count_for("random_batch")?;
        let mut rng = Philox::new(seed ^ 0xBA7C_4E5D);
        let mut values = memopt_core::host_vec_with_capacity(count)?;
        values.extend((0..count).map(|_| if rng.next_uniform() < 0.3 { 1.0 } else { 0.0 }));
        Tensor::from_vec::<f32>(values, dims, device, MemoryKind::Input)?
    }
    .with_spike_flag(model.spike_input());
    let labels = if device.is_meta() {
        Tensor::zeros([n], DType::I64, device, MemoryKind::Input)?
    } else {
        let classes = model.spec().classes.max(1) as u64;
        let mut labels: Vec<i64> = memopt_core::host_vec_with_capacity(n)?;
        labels.extend((0..n as u64).map(|i| ((i.wrapping_mul(7).wrapping_add(seed)) % classes) as i64));
        Tensor::from_vec(labels, [n], device, MemoryKind::Input)?
    };
    Ok(Batch {
        input,
        target: Target::Labels(labels),
    })
}

/// The step options every plan is made for and every Meta step that predicts a plan's peak
/// runs with (the estimator, the planner's segment measurements, the memory profile): those of
/// `memopt train` ([`StepOptions::default`]). The final neuron states are not kept, so each is
/// released as soon as nothing in the step reads it; a step that keeps them
/// (`StepOptions::keep_states`) holds them on top of the planned peak.
pub const PLANNED_STEP: StepOptions = StepOptions {
    keep_grads: false,
    input_grad: false,
    keep_states: false,
    keep_output: false,
    skip_update: false,
};

/// A model, its trainer and a batch, ready to step.
pub struct StepSession {
    model: Model,
    trainer: Trainer,
    batch: Batch,
}

impl StepSession {
    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model, trainer and batch, taken apart (to run steps with other options).
    pub fn into_parts(self) -> (Model, Trainer, Batch) {
        (self.model, self.trainer, self.batch)
    }

    /// Replaces the model's plan (validated; allocates nothing).
    pub fn apply_plan(&mut self, plan: &Plan) -> Result<()> {
        Ok(self.model.apply_plan(plan)?)
    }

    /// One training step (forward, backward, update) with the options plans are made for
    /// ([`PLANNED_STEP`]): the gradients are freed after the update and the final neuron states
    /// as soon as nothing reads them.
    pub fn step(&mut self) -> Result<StepOutput> {
        self.step_with(PLANNED_STEP)
    }

    /// One training step with `opts` (keep the gradients or the final neuron states, ...).
    pub fn step_with(&mut self, opts: StepOptions) -> Result<StepOutput> {
        Ok(self.trainer.step(&self.model, &self.batch, opts)?)
    }
}

/// Whether `plan` stores anything whose size depends on the data (the sparse compressor), in
/// which case a Meta estimate is an upper bound instead of the exact figure.
pub fn plan_is_data_dependent(plan: &Plan) -> bool {
    plan.entries
        .iter()
        .any(|e| e.policy.compressor() == Some(CompressorKind::Sparse))
}
