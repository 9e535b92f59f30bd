//! Per-module costs of a workload, learned from the module calls of one Meta step.

use crate::Result;
use crate::workload::Workload;
use memopt_checkpoint::Plan;
use memopt_checkpoint::module::{CallObserver, ModuleCall, chain_links, module_cost, observe_calls};
use memopt_core::{DType, MemoryTracker, Phase, Shape};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// One input of a module call, as the cost model needs it (for compression costs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputInfo {
    /// Dimensions.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
    /// Whether it holds spikes (then binary compressors apply).
    pub is_spike: bool,
    /// The spikes each value averages, when it is known to be pooled spikes (then binary
    /// compressors keep it as spike counts); absent in cost models saved before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_spike_window: Option<u16>,
}

impl InputInfo {
    /// What is known about its values.
    pub fn known_values(&self) -> memopt_core::KnownValues {
        memopt_core::KnownValues::from_parts(self.is_spike, self.pooled_spike_window)
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.shape.elem_count() as u64 * self.dtype.size_in_bytes() as u64
    }
}

/// The forward cost of one module over a step (summed over its calls).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleCostEntry {
    /// Module path.
    pub path: String,
    /// Module type.
    pub module_type: String,
    /// Whether the module has no children (only leaves are calibrated one by one).
    pub leaf: bool,
    /// Names of its direct children, in order.
    pub children: Vec<String>,
    /// For a module that inlines children ([`memopt_checkpoint::PlannerHints::inlined_children`]):
    /// the relative paths of its chain's links (`proj_bn.2`), which runs of children in plans
    /// count; empty otherwise (runs count `children`). See [`ModuleCostEntry::chain`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// Forward calls per step.
    pub calls: u64,
    /// Forward FLOPs per step (the module's own work, children excluded).
    pub flops: u64,
    /// Forward bytes moved per step (own work).
    pub bytes: u64,
    /// The inputs of its first call.
    pub inputs: Vec<InputInfo>,
    /// Whether its outputs are its parent's outputs (its parent's final op, or a container's
    /// last child): when the parent is the last module of a recomputed segment, so is this
    /// module, and its recomputation materialises only what its own backward keeps. False in
    /// cost models saved before it was recorded.
    #[serde(default)]
    pub ends_parent: bool,
    /// Bytes of the state it carries from one time step to the next (a neuron's membrane
    /// potential: one time step of its input), which a time-chunked segment keeps at every
    /// chunk boundary; 0 for a module without state, and in cost models saved before it was
    /// recorded.
    #[serde(default)]
    pub state_bytes: u64,
}

impl ModuleCostEntry {
    /// The relative paths of the links runs of its children count: [`ModuleCostEntry::links`]
    /// when it inlines children, otherwise its direct children.
    pub fn chain(&self) -> &[String] {
        if self.links.is_empty() {
            &self.children
        } else {
            &self.links
        }
    }
}

#[derive(Default)]
struct Collector {
    order: Vec<String>,
    entries: HashMap<String, ModuleCostEntry>,
}

struct Sink(RefCell<Collector>);

impl CallObserver for Sink {
    fn on_call(&self, call: &ModuleCall<'_>) {
        if call.phase != Phase::Forward {
            return;
        }
        let ins: Vec<Shape> = call.inputs.iter().map(|v| v.shape.clone()).collect();
        let outs: Vec<Shape> = call.outputs.iter().map(|v| v.shape.clone()).collect();
        let cost = module_cost(call.module, &ins, &outs);
        let mut c = self.0.borrow_mut();
        let Collector { order, entries } = &mut *c;
        let entry = entries.entry(call.path.to_string()).or_insert_with(|| {
            order.push(call.path.to_string());
            ModuleCostEntry {
                path: call.path.to_string(),
                module_type: call.module.type_name().to_string(),
                leaf: call.module.children().is_empty(),
                children: call.module.children().into_iter().map(|(n, _)| n).collect(),
                links: if call.module.inlined_children().is_empty() {
                    Vec::new()
                } else {
                    chain_links(call.module).into_iter().map(|l| l.name).collect()
                },
                calls: 0,
                flops: 0,
                bytes: 0,
                inputs: call
                    .inputs
                    .iter()
                    .map(|v| InputInfo {
                        shape: v.shape.clone(),
                        dtype: v.dtype,
                        is_spike: v.is_spike,
                        pooled_spike_window: v.pooled_spike_window,
                    })
                    .collect(),
                ends_parent: call.ends_parent,
                state_bytes: if call.module.is_stateful() && call.module.children().is_empty() {
                    call.inputs.first().map_or(0, |v| {
                        let dims = v.shape.dims();
                        let t = dims.first().copied().unwrap_or(1).max(1) as u64;
                        (v.shape.elem_count() as u64).saturating_mul(v.dtype.size_in_bytes() as u64) / t
                    })
                } else {
                    0
                },
            }
        });
        entry.calls += 1;
        // Time estimates saturate (see `ModuleCost`).
        entry.flops = entry.flops.saturating_add(cost.flops);
        entry.bytes = entry.bytes.saturating_add(cost.bytes);
    }
}

/// Per-module forward costs of `workload` and its parameter bytes, from one step on Meta with
/// every module stored (nothing is computed), in module order (parents before children).
/// Per-module cost entries (parents before children), the parameter bytes and the time steps
/// of one Meta step of `workload`.
pub(crate) fn collect(workload: &Workload) -> Result<(Vec<ModuleCostEntry>, u64, usize)> {
    let tracker = MemoryTracker::new(workload.meta_device());
    let _installed = MemoryTracker::install(tracker);
    let mut session = workload.instantiate(workload.meta_device(), &Plan::store_all())?;
    let sink = Rc::new(Sink(RefCell::new(Collector::default())));
    {
        let _observe = observe_calls(sink.clone());
        session.step()?;
    }
    let param_bytes = session
        .model()
        .params()
        .iter()
        .map(|(_, p)| p.tensor().view_bytes())
        .sum();
    let mut c = sink.0.borrow_mut();
    let mut entries = Vec::with_capacity(c.order.len());
    for info in session.model().modules() {
        if let Some(e) = c.entries.remove(&info.path) {
            entries.push(e);
        }
    }
    Ok((entries, param_bytes, session.model().spec().time_steps))
}
