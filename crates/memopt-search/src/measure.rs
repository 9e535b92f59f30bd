//! Exact memory figures of one segment under one option, measured by running the segment on
//! its own on Meta: forward with its input, then backward seeded with its output gradients,
//! on a fresh tracker. Composed by [`crate::chain::ChainModel`], they give a plan's peak.

use crate::sites::Site;
use crate::{Result, SearchError};
use memopt_checkpoint::autograd::VarId;
use memopt_checkpoint::policy::PLAN_VERSION;
use memopt_checkpoint::{
    Cx, Model, Plan, PlanEntry, Policy, PolicyTable, Recording, RunShape, Stop, Var, ops,
};
use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Philox, Tensor};
use memopt_profiler::PLANNED_STEP;

/// Exact figures of one segment under one option, in bytes (see [`crate::chain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Peak during its forward pass, its input included.
    pub forward_peak: u64,
    /// Held from its forward to its backward pass (its input when it keeps it included).
    pub kept: u64,
    /// Peak during its backward pass (recomputation included), states excluded.
    pub backward_peak: u64,
    /// Neuron states held until the end of the step: none under the planned step options
    /// ([`PLANNED_STEP`], which release each final state as soon as nothing reads it); for the
    /// loss, its value.
    pub states: u64,
    /// Parameter gradients held after its backward (none when the step updates in backward).
    pub param_grads: u64,
}

fn placeholder(info: &memopt_checkpoint::module::ValueInfo, device: Device) -> Result<Tensor> {
    Ok(
        Tensor::zeros(info.shape.clone(), info.dtype, device, MemoryKind::Activation)?
            .with_known_values(info.known_values()),
    )
}

/// The tracker a measurement installs: the figures are requested bytes, which a counting
/// tracker gives on Meta without replaying the caching allocator (the same figures, see
/// [`MemoryTracker::counting`]); elsewhere an ordinary one.
fn measuring_tracker(device: Device) -> std::sync::Arc<MemoryTracker> {
    match device {
        Device::Meta(target) => MemoryTracker::counting(target),
        other => MemoryTracker::new(other),
    }
}

/// Runs `site` of `model` (built on Meta) under `policy`. `first` marks the first segment,
/// whose input is the batch (held by the caller, not by the segment, and needing no gradient).
/// With `update_in_backward` the step updates each parameter in backward
/// ([`Plan::update_in_backward`]): the segment's gradients are freed as soon as they are final,
/// inside its backward, and none is left after it.
pub fn measure(
    model: &Model,
    site: &Site,
    policy: Policy,
    first: bool,
    update_in_backward: bool,
) -> Result<Figures> {
    let run = RunShape {
        training: model.is_training(),
        time_steps: Some(model.spec().time_steps),
    };
    let plan = Plan {
        update_in_backward,
        version: PLAN_VERSION,
        entries: vec![PlanEntry {
            path: site.path.clone(),
            children: site.run,
            into_next: site.into_next,
            policy,
        }],
    };
    let table = PolicyTable::from_plan(model.root(), &plan, run)?;
    let module = model
        .module(&site.path)
        .ok_or_else(|| SearchError::Internal(format!("no module at '{}'", site.path)))?;
    // The batch (first segment) is part of the base and lives outside the measured tracker; a
    // later segment's input is allocated inside it, so its lifetime is seen exactly.
    let outside: Vec<Tensor> = if first {
        site.inputs
            .iter()
            .map(|i| placeholder(i, model.device()))
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let tracker = measuring_tracker(model.device());
    let _installed = MemoryTracker::install(tracker.clone());
    // Offloaded payloads go to the device's host (Meta of the CPU for Meta of a GPU): a
    // counting tracker of their own, so that no measurement leaves bookkeeping behind.
    let host = model.device().host();
    let _host = (host != model.device()).then(|| MemoryTracker::install(measuring_tracker(host)));
    let inputs = if first {
        outside
    } else {
        site.inputs
            .iter()
            .map(|i| placeholder(i, model.device()))
            .collect::<Result<_>>()?
    };
    let mut cx = Cx::new(
        model.device(),
        &table,
        Philox::new(0),
        Recording::On,
        model.is_training(),
    );
    // The planner plans the step `memopt train` runs: final states not kept
    // (`StepOptions::keep_states` false), so each is released as soon as nothing reads it.
    cx.set_keep_final_states(PLANNED_STEP.keep_states);
    if update_in_backward {
        // The update itself allocates nothing (optimizers update in place): only the
        // gradient's release matters here.
        cx.update_in_backward(Box::new(|_, _| Ok(())), false);
    }
    let leaves: Vec<Var> = inputs.into_iter().map(|t| cx.leaf(t, !first)).collect();
    let outputs = {
        let _scope = enter_scope(Scope::new(site.path.as_str(), Phase::Forward));
        match site.run {
            None => cx.call_here(module, leaves).map_err(Stop::into_error)?,
            Some([start, end]) => cx
                .call_child_run(module, start, end, site.into_next, leaves)
                .map_err(Stop::into_error)?,
        }
    };
    let forward_peak = tracker.peak_bytes();
    let states: u64 = cx.states().under("").iter().map(|(_, v)| v.held_bytes()).sum();
    let shapes: Vec<(VarId, memopt_core::Shape)> = outputs
        .iter()
        .filter_map(|v| v.id().map(|id| (id, v.shape().clone())))
        .collect();
    drop(outputs);
    let kept = tracker.current_bytes() - states;
    tracker.reset_peak();
    let seeds: Vec<(VarId, Tensor)> = shapes
        .into_iter()
        .map(|(id, shape)| {
            Ok((
                id,
                Tensor::zeros(shape, DType::F32, model.device(), MemoryKind::Gradient)?,
            ))
        })
        .collect::<Result<_>>()?;
    let leaf_grads = cx.backward_with(seeds)?;
    let backward_peak = tracker.peak_bytes() - states;
    let param_grads: u64 = cx.grads().iter().map(|(_, g)| g.view_bytes()).sum();
    drop(leaf_grads);
    Ok(Figures {
        forward_peak,
        kept,
        backward_peak,
        states,
        param_grads,
    })
}

/// The loss after the chain (time average and cross-entropy against `n` labels), run on its own
/// like a segment whose input is the model's output, on Meta `device`.
pub fn measure_loss(model_output: &Site, n: usize, device: Device) -> Result<Figures> {
    let infos = &model_output.outputs;
    let output = infos
        .first()
        .ok_or_else(|| SearchError::Internal("the model returned nothing".into()))?;
    let labels = Tensor::zeros([n], DType::I64, device, MemoryKind::Input)?;
    let tracker = measuring_tracker(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let input = placeholder(output, device)?;
    let policies = PolicyTable::default();
    let mut cx = Cx::new(device, &policies, Philox::new(0), Recording::On, true);
    let x = cx.leaf(input, true);
    let loss = {
        let _scope = enter_scope(Scope::new("", Phase::Forward));
        let rate = if x.dims().len() >= 3 {
            ops::mean_dim(&mut cx, &x, 0)?
        } else {
            x
        };
        ops::cross_entropy(&mut cx, &rate, &labels)?
    };
    // The loss value is held by the trainer until the whole backward pass is done, like a
    // neuron state.
    let loss_bytes = loss.held_bytes();
    let forward_peak = tracker.peak_bytes();
    let kept = tracker.current_bytes() - loss_bytes;
    tracker.reset_peak();
    let grads = cx.backward(&loss)?;
    let backward_peak = tracker.peak_bytes() - loss_bytes;
    drop((loss, grads));
    Ok(Figures {
        forward_peak,
        kept,
        backward_peak,
        states: loss_bytes,
        param_grads: 0,
    })
}
