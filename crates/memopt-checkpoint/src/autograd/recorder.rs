//! The recorder of a step: the tape (while recording), the parameter gradients, the readers
//! each parameter still has in backward and the update in backward. It is the part of the
//! forward context that autograd owns; the context `C` it records for is a type parameter, so
//! this floor knows nothing of modules or policies.

use super::backward::{Backward, BackwardOp, Typed};
use super::{Gradients, ParamReaders, Tape, Var, VarId};
use crate::Result;
use crate::param::{Param, ParamId};
use memopt_core::Tensor;
use memopt_core::memory::{Phase, Scope, current_scope, enter_scope};
use std::collections::BTreeSet;

/// What the update in backward applies to a parameter whose gradient is final: the optimizer's
/// update of that parameter (see [`crate::Cx::update_in_backward`]).
pub type UpdateHook<'m> = Box<dyn FnMut(ParamId, &Tensor) -> Result<()> + 'm>;

/// One op to record: its backward, the tape ids of its input slots and what differs between
/// ops (recorded even when no input needs a gradient; the parameters a segment's node reads).
/// Build it with [`Record::new`] and hand it to [`crate::Cx::record`] with the op's outputs.
pub struct Record<'m, C> {
    op: Box<dyn BackwardOp<'m, C> + 'm>,
    inputs: Vec<Option<VarId>>,
    always: bool,
    params: Vec<ParamId>,
}

impl<'m, C: super::BackwardContext<'m> + 'm> Record<'m, C> {
    /// A typed op with input slots `inputs` (an absent optional input as `None`; the op's
    /// backward receives the same slots).
    pub fn new<const N: usize>(op: impl Backward<N> + 'm, inputs: [Option<&Var>; N]) -> Self {
        Self::from_ids(op, inputs.map(|v| v.and_then(Var::id)))
    }

    /// [`Record::new`] from the slots' tape ids, for an op that consumed an input's value.
    pub fn from_ids<const N: usize>(op: impl Backward<N> + 'm, inputs: [Option<VarId>; N]) -> Self {
        Self::erased(Box::new(Typed(op)), inputs.to_vec())
    }
}

impl<'m, C> Record<'m, C> {
    /// An op implementing [`BackwardOp`] directly, reading `inputs`.
    pub fn erased(op: Box<dyn BackwardOp<'m, C> + 'm>, inputs: Vec<Option<VarId>>) -> Self {
        Record {
            op,
            inputs,
            always: false,
            params: Vec::new(),
        }
    }

    /// Recorded while recording even when none of its inputs needs a gradient (a chunked
    /// BatchNorm's gradient-sums pass needs its BatchNorm on the tape).
    pub fn always(mut self) -> Self {
        self.always = true;
        self
    }

    /// A checkpointed segment's node, which reads `params` (those its forward read without a
    /// tape): recorded even when none of its inputs needs a gradient (its parameters do).
    pub(crate) fn reading(mut self, params: Vec<ParamId>) -> Self {
        self.params = params;
        self.always()
    }
}

/// What an op gives: tensors or an already formed value, returned as values of the pass.
pub trait RecordedOutputs {
    /// The values returned.
    type Values;
    /// How many outputs there are.
    fn count(&self) -> usize;
    /// The values, tracked under `ids` when the op was recorded, as they are otherwise.
    fn into_values(self, ids: Option<Vec<VarId>>) -> Self::Values;
}

impl RecordedOutputs for Vec<Tensor> {
    type Values = Vec<Var>;

    fn count(&self) -> usize {
        self.len()
    }

    fn into_values(self, ids: Option<Vec<VarId>>) -> Vec<Var> {
        match ids {
            Some(ids) => self
                .into_iter()
                .zip(ids)
                .map(|(t, id)| Var::tracked(t, id))
                .collect(),
            None => self.into_iter().map(Var::constant).collect(),
        }
    }
}

impl RecordedOutputs for Tensor {
    type Values = Var;

    fn count(&self) -> usize {
        1
    }

    fn into_values(self, ids: Option<Vec<VarId>>) -> Var {
        Var::constant(self).into_values(ids)
    }
}

/// A value (packed spikes stay packed): returned with its tape id, or unchanged.
impl RecordedOutputs for Var {
    type Values = Var;

    fn count(&self) -> usize {
        1
    }

    fn into_values(self, ids: Option<Vec<VarId>>) -> Var {
        match ids.and_then(|ids| ids.first().copied()) {
            Some(id) => self.with_id(id),
            None => self,
        }
    }
}

/// The tape and reader counts set aside while a checkpointed segment's forward runs without a
/// tape; [`Recorder::resume`] puts them back.
#[must_use = "resume the recorder with the paused tape"]
pub(crate) struct PausedTape<'m, C> {
    tape: Option<Tape<'m, C>>,
    reads: Option<BTreeSet<ParamId>>,
}

/// See the module documentation.
pub struct Recorder<'m, C> {
    tape: Option<Tape<'m, C>>,
    grads: Gradients,
    readers: ParamReaders,
    /// The update in backward, when on, and whether final gradients are kept for the caller.
    update: Option<(UpdateHook<'m>, bool)>,
}

impl<'m, C> Recorder<'m, C> {
    /// A recorder with a tape when `recording`.
    pub(crate) fn new(recording: bool) -> Self {
        Recorder {
            tape: recording.then(Tape::new),
            grads: Gradients::default(),
            readers: ParamReaders::default(),
            update: None,
        }
    }

    /// Whether a tape is being recorded.
    pub fn is_recording(&self) -> bool {
        self.tape.is_some()
    }

    /// Parameter gradients accumulated so far.
    pub fn gradients(&self) -> &Gradients {
        &self.grads
    }

    /// The parameter gradients, for backward ops to accumulate into.
    pub fn gradients_mut(&mut self) -> &mut Gradients {
        &mut self.grads
    }

    /// Takes the accumulated parameter gradients, leaving none.
    pub(crate) fn take_gradients(&mut self) -> Gradients {
        std::mem::take(&mut self.grads)
    }

    /// Turns on the update in backward (see [`crate::Cx::update_in_backward`]).
    pub(crate) fn update_in_backward(&mut self, update: UpdateHook<'m>, keep_grads: bool) {
        self.update = Some((update, keep_grads));
    }

    /// A parameter as a value: on the tape when recording, unless `frozen` (a gradient-sums
    /// pass must not accumulate parameter gradients). A segment's forward without a tape notes
    /// that its node reads it.
    pub(crate) fn param(&mut self, p: &Param, frozen: bool) -> Var {
        match &mut self.tape {
            Some(tape) if !frozen => Var::tracked(p.tensor().clone(), tape.param_leaf(p.id())),
            Some(_) => Var::constant(p.tensor().clone()),
            None => {
                if !frozen {
                    self.readers.read_untaped(p.id());
                }
                Var::constant(p.tensor().clone())
            }
        }
    }

    /// An input value; with `requires_grad` (while recording) a leaf whose gradient backward
    /// returns.
    pub(crate) fn leaf(&mut self, t: Tensor, requires_grad: bool) -> Var {
        match (&mut self.tape, requires_grad) {
            (Some(tape), true) => Var::tracked(t, tape.input_leaf()),
            _ => Var::constant(t),
        }
    }

    /// Records `record` with its `outputs`: while recording, when some input needs a gradient
    /// or the record says always, the outputs come back tracked; otherwise as they are.
    pub(crate) fn record<O: RecordedOutputs>(&mut self, record: Record<'m, C>, outputs: O) -> O::Values {
        let wanted = record.always || record.inputs.iter().any(Option::is_some);
        let Some(tape) = self.tape.as_mut().filter(|_| wanted) else {
            return outputs.into_values(None);
        };
        let ids: Vec<VarId> = (0..outputs.count()).map(|_| VarId::fresh()).collect();
        let reads = tape.push(
            record.op,
            record.inputs,
            ids.clone(),
            current_scope(),
            record.params,
        );
        self.readers.add(reads);
        outputs.into_values(Some(ids))
    }

    /// Sets the tape aside and starts collecting the parameters a checkpointed segment's
    /// forward reads without one.
    pub(crate) fn pause(&mut self) -> PausedTape<'m, C> {
        PausedTape {
            tape: self.tape.take(),
            reads: self.readers.begin_segment(),
        }
    }

    /// Puts back what [`Recorder::pause`] set aside; returns the parameters the segment read.
    pub(crate) fn resume(&mut self, paused: PausedTape<'m, C>) -> Vec<ParamId> {
        self.tape = paused.tape;
        self.readers.end_segment(paused.reads)
    }

    /// Records from now on into `tape` (a chunk's recomputation).
    pub(crate) fn start_tape(&mut self, tape: Tape<'m, C>) {
        self.tape = Some(tape);
    }

    /// Takes the tape, leaving none (recording stops).
    pub(crate) fn take_tape(&mut self) -> Option<Tape<'m, C>> {
        self.tape.take()
    }

    /// Ops reading each of `params` have run their backward: the gradients of those no reader
    /// is left for are final, and the update in backward, when on, applies to them now.
    pub(crate) fn readers_done(&mut self, params: &[ParamId]) -> Result<()> {
        if params.is_empty() {
            return Ok(());
        }
        for p in self.readers.done(params) {
            let Some((update, keep)) = self.update.as_mut() else {
                continue;
            };
            if let Some(g) = self.grads.finalize(p, *keep) {
                let _scope = enter_scope(Scope::new("", Phase::Optimizer));
                update(p, &g)?;
            }
        }
        Ok(())
    }
}
