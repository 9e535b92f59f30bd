//! A model: a module tree, the memory policies in force and the input it expects.

use crate::autograd::Var;
use crate::context::Cx;
use crate::module::{Module, ModuleInfo, find_module, module_infos, named_buffers, named_params};
use crate::param::{Buffer, Param};
use crate::policy::{Plan, Policy, PolicyTable, RunShape};
use crate::{CheckpointError, Result, Stop};
use memopt_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

/// What a model takes: `[T, N, sample...]` inputs and class labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSpec {
    /// Time steps `T` (1 for a non-spiking model).
    pub time_steps: usize,
    /// Dimensions of one sample, e.g. `[2, 48, 48]`.
    pub sample: Vec<usize>,
    /// Number of classes of the labels.
    pub classes: usize,
}

impl InputSpec {
    /// Input dimensions for a batch of `n`: `[T, N, sample...]`.
    pub fn input_dims(&self, n: usize) -> Vec<usize> {
        let mut d = vec![self.time_steps, n];
        d.extend_from_slice(&self.sample);
        d
    }
}

/// A trainable model. Memory policies are assigned with [`Model::apply_plan`] and friends, which
/// validate first and change nothing when they reject a plan.
pub struct Model {
    name: String,
    root: Box<dyn Module>,
    policies: PolicyTable,
    spec: InputSpec,
    device: Device,
    training: bool,
    spike_input: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .field("device", &self.device)
            .field("policies", &self.policies)
            .finish()
    }
}

impl Model {
    /// A model named `name` whose parameters live on `device`.
    pub fn new(name: impl Into<String>, root: Box<dyn Module>, spec: InputSpec, device: Device) -> Self {
        Model {
            name: name.into(),
            root,
            policies: PolicyTable::default(),
            spec,
            device,
            training: true,
            spike_input: false,
        }
    }

    /// The same model, declaring whether its input is spikes (every value 0 or 1, as event
    /// frames are). A spike input carries the spike flag, so a checkpoint of the first segment
    /// keeps it bit-packed (1 bit per value) instead of as f32.
    pub fn with_spike_input(mut self, spikes: bool) -> Self {
        self.spike_input = spikes;
        self
    }

    /// Whether the input is declared to be spikes ([`Self::with_spike_input`]).
    pub fn spike_input(&self) -> bool {
        self.spike_input
    }

    /// Name (zoo name for zoo models).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The root module.
    pub fn root(&self) -> &dyn Module {
        self.root.as_ref()
    }

    /// Expected input.
    pub fn spec(&self) -> &InputSpec {
        &self.spec
    }

    /// Device of the parameters.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether the model runs in training mode (batch statistics, dropout).
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// Switches between training and eval mode. Chunked policies that eval mode allowed but
    /// training forbids are rejected (and the mode left unchanged).
    pub fn set_training(&mut self, training: bool) -> Result<()> {
        let run = RunShape {
            training,
            time_steps: Some(self.spec.time_steps),
        };
        PolicyTable::from_plan(self.root(), &self.policies.to_plan(), run)?;
        self.training = training;
        Ok(())
    }

    fn run_shape(&self) -> RunShape {
        RunShape {
            training: self.training,
            time_steps: Some(self.spec.time_steps),
        }
    }

    /// The policies in force.
    pub fn policies(&self) -> &PolicyTable {
        &self.policies
    }

    /// The policies in force as a plan.
    pub fn plan(&self) -> Plan {
        self.policies.to_plan()
    }

    /// Replaces the policies with `plan` after validating every entry; on error nothing changes.
    pub fn apply_plan(&mut self, plan: &Plan) -> Result<()> {
        self.policies = PolicyTable::from_plan(self.root(), plan, self.run_shape())?;
        Ok(())
    }

    /// Whether `plan` would be accepted by [`Model::apply_plan`] (the error says why not);
    /// the model's policies do not change either way.
    pub fn check_plan(&self, plan: &Plan) -> Result<()> {
        PolicyTable::from_plan(self.root(), plan, self.run_shape()).map(|_| ())
    }

    /// Sets one module's policy (validated).
    pub fn set_policy(&mut self, path: &str, policy: Policy) -> Result<()> {
        self.policies = self.policies.with(self.root(), path, policy, self.run_shape())?;
        Ok(())
    }

    /// Moves `path`'s policy to its children (spatial split).
    pub fn split_policy(&mut self, path: &str) -> Result<()> {
        self.policies = self.policies.split(self.root(), path, self.run_shape())?;
        Ok(())
    }

    /// Every module, parents first.
    pub fn modules(&self) -> Vec<ModuleInfo> {
        module_infos(self.root())
    }

    /// The module at `path`.
    pub fn module(&self, path: &str) -> Option<&dyn Module> {
        find_module(self.root(), path)
    }

    /// Every parameter with its path.
    pub fn params(&self) -> Vec<(String, &Param)> {
        named_params(self.root())
    }

    /// Every buffer with its path.
    pub fn buffers(&self) -> Vec<(String, &Buffer)> {
        named_buffers(self.root())
    }

    /// Number of parameter elements.
    pub fn param_count(&self) -> usize {
        self.params().iter().map(|(_, p)| p.elem_count()).sum()
    }

    /// Checks that `input` fits: shape `[T, N, sample...]` with N >= 1, dtype f32, on the
    /// model's device.
    pub fn check_input(&self, input: &Tensor) -> Result<()> {
        let d = input.dims();
        let n = d.get(1).copied().unwrap_or(0);
        let expected = self.spec.input_dims(n.max(1));
        if d.len() != expected.len() || d[0] != expected[0] || d[2..] != expected[2..] || n == 0 {
            return Err(CheckpointError::InvalidInput(format!(
                "model '{}' takes input [T={}, N, {}] with N >= 1, got {}",
                self.name,
                self.spec.time_steps,
                self.spec
                    .sample
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                input.shape()
            )));
        }
        if input.dtype() != DType::F32 {
            return Err(CheckpointError::InvalidInput(format!(
                "input dtype must be f32, got {}",
                input.dtype()
            )));
        }
        if input.device() != self.device {
            return Err(CheckpointError::InvalidInput(format!(
                "input is on {} but the model is on {}",
                input.device(),
                self.device
            )));
        }
        Ok(())
    }

    /// Runs the root module on `x` under the policies in force.
    pub fn forward<'m>(&'m self, cx: &mut Cx<'m>, x: Var) -> Result<Var> {
        let out = cx
            .call_here(self.root.as_ref(), vec![x])
            .map_err(Stop::into_error)?;
        crate::context::single(out, "", self.root.as_ref())
    }
}
