//! The tape and the backward pass.

use super::backward::{BackwardContext, BackwardGrads, BackwardOp, InputSlot};
use super::{Var, VarId};
use crate::param::ParamId;
use crate::{CheckpointError, Result};
use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{MemoryKind, Tensor, kernels};
use std::collections::{HashMap, HashSet};

struct Node<'m, C> {
    op: Box<dyn BackwardOp<'m, C> + 'm>,
    inputs: Vec<Option<VarId>>,
    outputs: Vec<VarId>,
    scope: Scope,
    /// The parameters its backward reads (see `param_readers.rs`).
    params: Vec<ParamId>,
}

/// The record of one forward pass: nodes in execution order, and which leaf values are
/// parameters or inputs whose gradient was requested. `C` is the context its nodes' backward
/// runs in.
pub struct Tape<'m, C> {
    nodes: Vec<Node<'m, C>>,
    params: HashMap<VarId, ParamId>,
    leaves: HashSet<VarId>,
}

impl<C> Default for Tape<'_, C> {
    fn default() -> Self {
        Tape::new()
    }
}

impl<'m, C> Tape<'m, C> {
    /// An empty tape.
    pub fn new() -> Self {
        Tape {
            nodes: Vec::new(),
            params: HashMap::new(),
            leaves: HashSet::new(),
        }
    }

    /// An empty tape with room for `nodes` ops (a chunk's recomputation records as many ops as
    /// the chunk before it, so its tape need not grow op by op).
    pub(crate) fn with_capacity(nodes: usize) -> Self {
        Tape {
            nodes: Vec::with_capacity(nodes),
            ..Tape::new()
        }
    }

    /// Number of recorded ops.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub(crate) fn param_leaf(&mut self, id: ParamId) -> VarId {
        let v = VarId::fresh();
        self.params.insert(v, id);
        v
    }

    pub(crate) fn input_leaf(&mut self) -> VarId {
        let v = VarId::fresh();
        self.leaves.insert(v);
        v
    }

    /// Records an op reading `inputs` and, for a checkpointed segment, `segment_params` (the
    /// parameters its forward read without a tape). Returns the parameters the node reads.
    pub(crate) fn push(
        &mut self,
        op: Box<dyn BackwardOp<'m, C> + 'm>,
        inputs: Vec<Option<VarId>>,
        outputs: Vec<VarId>,
        scope: Scope,
        segment_params: Vec<ParamId>,
    ) -> &[ParamId] {
        let mut params = segment_params;
        params.extend(
            inputs
                .iter()
                .flatten()
                .filter_map(|v| self.params.get(v).copied()),
        );
        params.sort_unstable();
        params.dedup();
        self.nodes.push(Node {
            op,
            inputs,
            outputs,
            scope,
            params,
        });
        &self.nodes.last().expect("just pushed").params
    }

    /// Runs backward from `seeds` (value id and its gradient), newest node first. Parameter
    /// gradients accumulate into `cx`'s [`crate::Gradients`]; returns the gradients of the input
    /// leaves (see [`crate::Cx::leaf`]) that received one. It stops after a node when
    /// [`BackwardContext::stops_backward`] says so (a chunked BatchNorm's gradient-sums pass,
    /// `policy/chunk_passes.rs`).
    pub(crate) fn backward(self, cx: &mut C, seeds: Vec<(VarId, Tensor)>) -> Result<HashMap<VarId, Tensor>>
    where
        C: BackwardContext<'m>,
    {
        let Tape {
            nodes,
            params: params_of,
            leaves,
        } = self;
        let mut grads: HashMap<VarId, Tensor> = HashMap::new();
        for (id, g) in seeds {
            accumulate(&mut grads, id, g)?;
        }
        let mut pending = nodes.into_iter().rev();
        for mut node in pending.by_ref() {
            let params = std::mem::take(&mut node.params);
            run_node(cx, node, &params_of, &mut grads)?;
            // Once the node has run, it reads its parameters no more.
            cx.recorder().readers_done(&params)?;
            // A chunked BatchNorm's gradient-sums pass needs nothing recorded before it.
            if cx.stops_backward() {
                break;
            }
        }
        // The nodes a gradient-sums pass stops before never run (they read no parameter: the
        // pass freezes them).
        for node in pending {
            debug_assert!(
                node.params.is_empty(),
                "a gradient-sums pass records no parameter reader"
            );
            cx.recorder().readers_done(&node.params)?;
        }
        grads.retain(|id, _| leaves.contains(id));
        Ok(grads)
    }
}

/// Runs one node's backward: takes its outputs' gradients from `grads`, accumulates parameter
/// gradients into `cx`'s [`crate::Gradients`] (`param_of`: the tape's parameter leaves) and its
/// inputs' into `grads`. A node no gradient reached does nothing.
fn run_node<'m, C: BackwardContext<'m>>(
    cx: &mut C,
    node: Node<'m, C>,
    param_of: &HashMap<VarId, ParamId>,
    grads: &mut HashMap<VarId, Tensor>,
) -> Result<()> {
    let outputs: Vec<Option<Tensor>> = node.outputs.iter().map(|id| grads.remove(id)).collect();
    if outputs.iter().all(Option::is_none) {
        return Ok(());
    }
    let slots: Vec<InputSlot> = node
        .inputs
        .iter()
        .map(|i| InputSlot {
            needs_grad: i.is_some(),
            param: i.and_then(|v| param_of.get(&v).copied()),
        })
        .collect();
    let _scope = enter_scope(node.scope.with_phase(Phase::Backward));
    let name = node.op.name();
    let input_grads = node.op.backward(
        cx,
        BackwardGrads {
            outputs,
            inputs: slots.clone(),
        },
    )?;
    if input_grads.len() != node.inputs.len() {
        return Err(CheckpointError::Autograd(format!(
            "op {name} returned {} input gradients for {} inputs",
            input_grads.len(),
            node.inputs.len()
        )));
    }
    for ((input, slot), g) in node.inputs.iter().zip(&slots).zip(input_grads) {
        let (Some(id), Some(g)) = (input, g) else { continue };
        match slot.param {
            Some(p) => {
                let acc = cx
                    .recorder()
                    .gradients_mut()
                    .accumulator(p, g.dims(), g.device())?;
                kernels::add_assign(&acc, &g)?;
            }
            None => accumulate(grads, *id, g)?,
        }
    }
    Ok(())
}

/// Adds `g` to the gradient of `id`, in place when the existing gradient is not shared.
fn accumulate(grads: &mut HashMap<VarId, Tensor>, id: VarId, g: Tensor) -> Result<()> {
    match grads.remove(&id) {
        None => {
            grads.insert(id, g);
        }
        Some(old) => {
            let sum = if old.is_exclusive() {
                kernels::add_assign(&old, &g)?;
                old
            } else {
                let s = kernels::add(&old, &g)?;
                s.set_kind(MemoryKind::Gradient);
                s
            };
            grads.insert(id, sum);
        }
    }
    Ok(())
}

impl Var {
    /// The id of a value that must be on the tape (errors otherwise).
    pub(crate) fn expect_id(&self, what: &str) -> Result<VarId> {
        self.id()
            .ok_or_else(|| CheckpointError::Autograd(format!("{what} does not require a gradient")))
    }
}
