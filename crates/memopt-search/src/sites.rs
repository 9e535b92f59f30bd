//! The segments a plan can assign policies to: the chain of the model's top-level children,
//! each splittable into its own children when those form a chain. Found from one forward pass
//! on Meta with a module-call observer, which also gives every segment's input and output
//! shapes and spike flags, and its forward cost.

use crate::{Result, SearchError};
use memopt_checkpoint::module::{
    CallObserver, ModuleCall, ModuleCost, ValueInfo, batch_statistics_in, chain_links, module_cost,
    module_infos, observe_calls, time_coupling_in,
};
use memopt_checkpoint::{Cx, Model, Recording};
use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{ModulePath, Philox, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A module that can take a policy, with what flows through it.
#[derive(Debug, Clone)]
pub struct Site {
    /// Module path (the container's, for a run of children).
    pub path: String,
    /// For a run of consecutive children of the module at `path`: `[start, end)`.
    pub run: Option<[usize; 2]>,
    /// For a run: links of the next child's chain it also covers, from its first
    /// ([`memopt_checkpoint::PlanEntry::into_next`]; 0: none).
    pub into_next: usize,
    /// Module type.
    pub type_name: &'static str,
    /// Whether runs of its consecutive children can take one policy (see
    /// [`memopt_checkpoint::PlannerHints::supports_child_ranges`]).
    pub runs_allowed: bool,
    /// Inputs as passed in a forward pass.
    pub inputs: Vec<ValueInfo>,
    /// Outputs as returned.
    pub outputs: Vec<ValueInfo>,
    /// Forward cost of the module and everything below it.
    pub cost: ModuleCost,
    /// Whether it can run on part of the time steps at a time (nothing inside couples them but
    /// training BatchNorm, which chunked segments handle in passes).
    pub time_separable: bool,
    /// Training BatchNorms inside (modules that normalise with whole-batch statistics): a
    /// time-chunked segment runs one statistics pass per BatchNorm.
    pub batch_norms: usize,
    /// Whether a spiking neuron runs inside it.
    pub stateful: bool,
    /// Its children when they form a chain (empty otherwise).
    pub parts: Vec<Site>,
    /// The links of its chain when it inlines children
    /// ([`memopt_checkpoint::PlannerHints::inlined_children`]): its children with an inlined child's
    /// children in its place; empty otherwise. Runs of children and the chain model's split
    /// count these ([`Site::chain`]).
    pub links: Vec<Site>,
}

impl Site {
    /// Bytes of the inputs.
    pub fn input_bytes(&self) -> u64 {
        self.inputs.iter().map(ValueInfo::bytes).sum()
    }

    /// What runs of children count and the chain model splits it into: its [`Site::links`]
    /// when it inlines children, otherwise its parts.
    pub fn chain(&self) -> &[Site] {
        if self.links.is_empty() {
            &self.parts
        } else {
            &self.links
        }
    }

    /// The run of links `start..end` of its chain ([`Site::chain`]) as one site.
    pub fn run_of(&self, start: usize, end: usize) -> Site {
        let parts = &self.chain()[start..end];
        Site {
            path: self.path.clone(),
            run: Some([start, end]),
            into_next: 0,
            type_name: self.type_name,
            runs_allowed: false,
            inputs: parts[0].inputs.clone(),
            outputs: parts[end - start - 1].outputs.clone(),
            cost: parts
                .iter()
                .map(|p| p.cost)
                .fold(ModuleCost::ZERO, ModuleCost::plus),
            time_separable: parts.iter().all(|p| p.time_separable),
            batch_norms: parts.iter().map(|p| p.batch_norms).sum(),
            stateful: parts.iter().any(|p| p.stateful),
            parts: Vec::new(),
            links: Vec::new(),
        }
    }

    /// The model as a flat list of layers: Sequential containers (which allow runs of
    /// children and inline none) are expanded, other modules (blocks, leaves) are layers. Each
    /// layer comes with its container and its index there.
    pub fn layers(&self) -> Vec<Layer<'_>> {
        let mut out = Vec::new();
        self.collect_layers(&mut out);
        out
    }

    fn collect_layers<'a>(&'a self, out: &mut Vec<Layer<'a>>) {
        for (index, part) in self.parts.iter().enumerate() {
            if part.runs_allowed && part.links.is_empty() && !part.parts.is_empty() {
                part.collect_layers(out);
            } else {
                out.push(Layer {
                    site: part,
                    container: self,
                    index,
                });
            }
        }
    }

    /// How the site is named in plans and reports: `features.3`, `features[2..5]` or
    /// `features[1..2]+next[0..1]` ([`memopt_checkpoint::run_target`]).
    pub fn target(&self) -> String {
        memopt_checkpoint::run_target(&self.path, self.run, self.into_next)
    }

    /// Every site in pre-order (this one first).
    pub fn walk(&self) -> Vec<&Site> {
        let mut out = vec![self];
        for p in &self.parts {
            out.extend(p.walk());
        }
        out
    }
}

/// Inputs, outputs and own cost (leaves only) of each module path called.
type CallLog = HashMap<String, (Vec<ValueInfo>, Vec<ValueInfo>, ModuleCost)>;

/// One layer of [`Site::layers`].
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    /// The layer.
    pub site: &'a Site,
    /// Its container.
    pub container: &'a Site,
    /// Its index in the container.
    pub index: usize,
}

impl Layer<'_> {
    /// Bytes of its outputs.
    pub fn output_bytes(&self) -> u64 {
        self.site.outputs.iter().map(ValueInfo::bytes).sum()
    }
}

#[derive(Default)]
struct Calls(RefCell<CallLog>);

impl CallObserver for Calls {
    fn on_call(&self, call: &ModuleCall<'_>) {
        let shapes = |v: &[ValueInfo]| v.iter().map(|i| i.shape.clone()).collect::<Vec<_>>();
        let own = if call.module.children().is_empty() {
            module_cost(call.module, &shapes(call.inputs), &shapes(call.outputs))
        } else {
            ModuleCost::ZERO
        };
        self.0.borrow_mut().insert(
            call.path.to_string(),
            (call.inputs.to_vec(), call.outputs.to_vec(), own),
        );
    }
}

/// Runs one forward pass of `model` (on Meta) on `input` and returns its root site, whose
/// parts are the chain of top-level children (the root itself when its children do not form a
/// chain).
pub fn discover(model: &Model, input: &Tensor) -> Result<Site> {
    let calls = Rc::new(Calls::default());
    {
        let _observe = observe_calls(calls.clone());
        let policies = memopt_checkpoint::PolicyTable::default();
        let mut cx = Cx::new(
            model.device(),
            &policies,
            Philox::new(0),
            Recording::Off,
            model.is_training(),
        );
        let _scope = enter_scope(Scope::new("", Phase::Forward));
        let x = cx.leaf(input.clone(), false);
        model.forward(&mut cx, x)?;
    }
    let calls = calls.0.borrow();
    build(model, "", &calls)
}

fn build(model: &Model, path: &str, calls: &CallLog) -> Result<Site> {
    let module = model
        .module(path)
        .ok_or_else(|| SearchError::Internal(format!("module '{path}' disappeared")))?;
    let (inputs, outputs, _) = calls
        .get(path)
        .cloned()
        .ok_or_else(|| SearchError::Internal(format!("module '{path}' was not called in a forward pass")))?;
    let cost = calls
        .iter()
        .filter(|(p, _)| ModulePath::str_is_under(p, path))
        .map(|(_, c)| c.2)
        .fold(ModuleCost::ZERO, ModuleCost::plus);
    let parts = if module.children_form_chain() {
        module
            .children()
            .iter()
            .map(|(name, _)| build(model, &ModulePath::from(path).child(name), calls))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let links = if module.children_form_chain() && !module.inlined_children().is_empty() {
        chain_links(module)
            .iter()
            .map(|l| build(model, &ModulePath::from(path).child(&l.name), calls))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    Ok(Site {
        path: path.to_string(),
        run: None,
        into_next: 0,
        type_name: module.type_name(),
        runs_allowed: module.supports_child_ranges(),
        inputs,
        outputs,
        cost,
        time_separable: time_coupling_in(module, path, model.is_training()).is_none(),
        batch_norms: batch_statistics_in(module, &ModulePath::from(path), model.is_training()).len(),
        stateful: module_infos(module).iter().any(|i| i.stateful),
        parts,
        links,
    })
}
