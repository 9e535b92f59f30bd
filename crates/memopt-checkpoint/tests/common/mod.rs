//! Shared test fixtures: a small convolutional SNN that uses every layer kind, random batches,
//! and a step that keeps everything the policies must not change.

#![allow(dead_code)]

use memopt_checkpoint::module::{
    BatchNorm, Conv2d, Dropout, Flatten, Init, Linear, Neuron, Pool2d, Sequential,
};
use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::{Batch, InputSpec, Model, StepOptions, StepOutput, Target, Trainer, zoo};
use memopt_core::kernels::{Conv2dParams, NeuronConfig, NeuronKind, SgdConfig};
use memopt_core::memory::{MemoryAction, MemoryEvent, MemorySubscriber, Phase};
use memopt_core::{Device, MemoryKind, Philox, Tensor};
use std::sync::Mutex;

/// Conv-BN-LIF, MaxPool, Conv-BN-PLIF, AvgPool, Flatten, [Dropout, Linear, IF], Linear, on
/// `[T, N, 2, 8, 8]`: every layer kind, a parametric neuron, dropout and pooling.
pub fn tiny_conv_snn(device: Device, seed: u64, time_steps: usize) -> Model {
    let mut init = Init::new(device, seed);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let plif = NeuronConfig {
        kind: NeuronKind::Plif { decay_input: true },
        ..NeuronConfig::plif()
    };
    let block1 = Sequential::new()
        .push_named("conv", Conv2d::new(&mut init, 2, 4, 3, pad1, true).unwrap())
        .push_named("bn", BatchNorm::new_2d(&mut init, 4).unwrap())
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap());
    let block2 = Sequential::new()
        .push_named("conv", Conv2d::new(&mut init, 4, 6, 3, pad1, false).unwrap())
        .push_named("bn", BatchNorm::new_2d(&mut init, 6).unwrap())
        .push_named("sn", Neuron::new(&mut init, plif, 3.0).unwrap());
    let head = Sequential::new()
        .push_named("drop", Dropout::new(0.3))
        .push_named("fc", Linear::new(&mut init, 6 * 2 * 2, 12, true).unwrap())
        .push_named(
            "sn",
            Neuron::new(&mut init, NeuronConfig::if_neuron(), 2.0).unwrap(),
        );
    let root = Sequential::new()
        .push_named("block1", block1)
        .push_named("pool1", Pool2d::max(2, 2, 0))
        .push_named("block2", block2)
        .push_named("pool2", Pool2d::avg(2, 2, 0))
        .push_named("flatten", Flatten::new(2))
        .push_named("head", head)
        .push_named("out", Linear::new(&mut init, 12, 5, true).unwrap());
    let spec = InputSpec {
        time_steps,
        sample: vec![2, 8, 8],
        classes: 5,
    };
    Model::new("tiny-conv-snn", Box::new(root), spec, device)
}

/// A zoo model at its small size.
pub fn zoo_small(name: &str, device: Device, seed: u64) -> Model {
    let spec = zoo::entry(name).unwrap().small;
    zoo::build(name, &spec, device, seed).unwrap()
}

/// A random batch of `n` for `model`: spike-like inputs (0/1) and labels.
pub fn batch(model: &Model, n: usize, seed: u64) -> Batch {
    let mut rng = Philox::new(seed ^ 0xBA7C);
    let dims = model.spec().input_dims(n);
    let count: usize = dims.iter().product();
    let device = model.device();
    let values: Vec<f32> = (0..count)
        .map(|_| if rng.next_uniform() < 0.3 { 1.0 } else { 0.0 })
        .collect();
    let input = Tensor::from_vec(
        if device.is_meta() {
            vec![0.0; count]
        } else {
            values
        },
        dims,
        device,
        MemoryKind::Input,
    )
    .unwrap();
    let classes = model.spec().classes as u64;
    let labels: Vec<i64> = (0..n as u64).map(|i| ((i * 7 + seed) % classes) as i64).collect();
    Batch {
        input,
        target: Target::Labels(Tensor::from_vec(labels, [n], device, MemoryKind::Input).unwrap()),
    }
}

/// SGD with momentum and weight decay.
pub fn sgd(model: &Model) -> Sgd {
    let cfg = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 1e-4,
        nesterov: false,
    };
    Sgd::new(model, cfg).unwrap()
}

/// A trainer with [`sgd`].
pub fn trainer(model: &Model) -> Trainer {
    Trainer::new(Box::new(sgd(model)), 11)
}

/// Everything a step produces that memory policies must leave bit for bit unchanged.
#[derive(Debug, PartialEq)]
pub struct Fingerprint {
    pub loss: Option<u32>,
    pub grads: Vec<(String, Vec<u32>)>,
    pub input_grad: Option<Vec<u32>>,
    pub states: Vec<(String, Vec<u32>)>,
    pub buffers: Vec<(String, Vec<u32>)>,
    pub params_after: Vec<(String, Vec<u32>)>,
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().into_iter().map(f32::to_bits).collect()
}

impl Fingerprint {
    /// The same fingerprint without the final states (what a step that does not keep them
    /// gives).
    pub fn without_states(&self) -> Fingerprint {
        Fingerprint {
            loss: self.loss,
            grads: self.grads.clone(),
            input_grad: self.input_grad.clone(),
            states: Vec::new(),
            buffers: self.buffers.clone(),
            params_after: self.params_after.clone(),
        }
    }
}

/// Runs `steps` training steps and fingerprints the last one (plus parameters after it),
/// keeping the final states.
pub fn fingerprint(model: &Model, steps: usize, n: usize) -> Fingerprint {
    fingerprint_with(model, steps, n, true)
}

/// [`fingerprint`], keeping the final states (`StepOptions::keep_states`) or not (then released
/// as soon as nothing reads them, and the fingerprint has none).
pub fn fingerprint_with(model: &Model, steps: usize, n: usize, keep_states: bool) -> Fingerprint {
    let mut trainer = trainer(model);
    let opts = StepOptions {
        keep_grads: true,
        input_grad: true,
        keep_states,
        skip_update: false,
        keep_output: false,
    };
    let mut out = StepOutput::default();
    for s in 0..steps {
        out = trainer.step(model, &batch(model, n, s as u64), opts).unwrap();
    }
    let grads = out.grads.as_ref().unwrap();
    Fingerprint {
        loss: out.loss.map(f32::to_bits),
        grads: model
            .params()
            .into_iter()
            .filter_map(|(p, param)| grads.get(param.id()).map(|g| (p, bits(g))))
            .collect(),
        input_grad: out.input_grad.as_ref().map(bits),
        states: out
            .final_states
            .iter()
            .map(|(p, t)| (p.clone(), bits(t)))
            .collect(),
        buffers: model
            .buffers()
            .into_iter()
            .map(|(p, b)| (p, bits(b.tensor())))
            .collect(),
        params_after: model
            .params()
            .into_iter()
            .map(|(p, param)| (p, bits(param.tensor())))
            .collect(),
    }
}

/// One event as compared: action, bytes, kind, module path, phase, bytes held after it.
pub type Recorded = (MemoryAction, u64, MemoryKind, String, Phase, u64);

/// Records every memory event of a tracker it subscribes to.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<Recorded>>);

impl MemorySubscriber for Recorder {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push((
            e.action,
            e.bytes,
            e.kind,
            e.scope.path().to_string(),
            e.scope.phase(),
            e.current_bytes,
        ));
    }
}

impl Recorder {
    /// Bytes held just before the first event of the backward phase (what a step keeps from its
    /// forward for its backward, with what it holds throughout).
    pub fn held_at_backward(&self) -> u64 {
        let events = self.0.lock().unwrap();
        let first_backward = events
            .iter()
            .position(|e| e.4 == Phase::Backward)
            .expect("the step has a backward");
        events[first_backward - 1].5
    }
}

/// A plan entry: `path` itself (`children` `None`) or a run of its links, going on into the
/// next child's first `into_next` links.
pub fn entry(
    path: &str,
    children: Option<[usize; 2]>,
    into_next: usize,
    policy: memopt_checkpoint::Policy,
) -> memopt_checkpoint::PlanEntry {
    memopt_checkpoint::PlanEntry {
        path: path.into(),
        children,
        into_next,
        policy,
    }
}

/// A plan of `entries`.
pub fn plan_of(entries: Vec<memopt_checkpoint::PlanEntry>) -> memopt_checkpoint::Plan {
    let mut p = memopt_checkpoint::Plan::store_all();
    p.entries = entries;
    p
}

/// One step of the model `build` makes on `device`, under `plan`, on a tracker of its own:
/// its requested, allocated and reserved peaks, and every memory event.
pub fn step_recorded(
    build: impl Fn(Device) -> Model,
    plan: &memopt_checkpoint::Plan,
    device: Device,
    n: usize,
) -> ((u64, u64, u64), std::sync::Arc<Recorder>) {
    let tracker = memopt_core::MemoryTracker::new(device);
    let _installed = memopt_core::MemoryTracker::install(tracker.clone());
    let mut model = build(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = trainer(&model);
    let recorder = std::sync::Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    trainer
        .step(&model, &batch(&model, n, 0), StepOptions::default())
        .unwrap();
    let peaks = (
        tracker.peak_bytes(),
        tracker.allocated_peak_bytes(),
        tracker.reserved_peak_bytes(),
    );
    (peaks, recorder)
}

/// Two steps under `plan` against storing everything (bit for bit), and one step's peaks on
/// Meta against the CPU's, for the model `build` makes.
pub fn assert_exact_and_meta_matches_cpu(
    build: impl Fn(Device) -> Model + Copy,
    plan: &memopt_checkpoint::Plan,
    n: usize,
) {
    let baseline = fingerprint(&build(Device::Cpu), 2, n);
    let mut model = build(Device::Cpu);
    model.apply_plan(plan).unwrap();
    assert_eq!(fingerprint(&model, 2, n), baseline, "plan {}", plan.to_json());
    let cpu = step_recorded(build, plan, Device::Cpu, n).0;
    assert_eq!(
        step_recorded(build, plan, Device::META, n).0,
        cpu,
        "plan {}",
        plan.to_json()
    );
}

/// The output values of `model`'s forward on `input` (its whole batch), without recording,
/// in evaluation mode.
#[allow(dead_code)] // each test binary uses a part of this module
pub fn eval_values(model: &Model, input: Tensor) -> Vec<f32> {
    let mut cx = memopt_checkpoint::Cx::new(
        model.device(),
        model.policies(),
        Philox::new(0),
        memopt_checkpoint::Recording::Off,
        false,
    );
    let x = cx.leaf(input, false);
    let y = model.forward(&mut cx, x).unwrap();
    y.tensor().unwrap().to_vec_f32().unwrap()
}
