//! The backward half of a recorded op: typed ops with a fixed number of named input slots
//! ([`Backward`], as burn-autodiff's `Backward<B, N>`), which write only the parameter
//! gradients they are given, and the type-erased form the tape stores ([`BackwardOp`], which
//! nodes needing the whole context, such as checkpointed segments, implement directly).

use super::{Gradients, Recorder};
use crate::param::ParamId;
use crate::{CheckpointError, Result};
use memopt_core::{MemoryKind, Tensor};

/// What backward knows about one input slot of a recorded op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InputSlot {
    /// Whether a gradient is wanted for this input; false for an input that needs none and
    /// for an optional input the op was called without.
    pub needs_grad: bool,
    /// The parameter the input is, if any: ops accumulate such gradients straight into
    /// [`Gradients::accumulator`] instead of returning them.
    pub param: Option<ParamId>,
}

/// What a backward op receives: the gradients of its outputs and one [`InputSlot`] per input,
/// `[InputSlot; N]` for a typed op, a `Vec` for a variable-arity one.
pub struct BackwardGrads<S = Vec<InputSlot>> {
    /// Gradient of each output (`None` = no gradient reached it, i.e. zero).
    pub outputs: Vec<Option<Tensor>>,
    /// The input slots, in the order the op was recorded with.
    pub inputs: S,
}

impl<S> BackwardGrads<S> {
    /// The gradient of output `i`, or zeros shaped like `like` when none reached it (the
    /// zeros are recorded as a gradient).
    pub fn output_or_zeros(&self, i: usize, like: &Tensor) -> Result<Tensor> {
        match self.outputs.get(i).cloned().flatten() {
            Some(g) => Ok(g),
            None => zeros_like(like),
        }
    }

    /// Takes the gradient of output `i` (zeros shaped like `like` when none reached it). Taking
    /// it leaves the op the only holder, so a kernel may overwrite it with the input gradient.
    pub fn take_output_or_zeros(&mut self, i: usize, like: &Tensor) -> Result<Tensor> {
        match self.outputs.get_mut(i).and_then(Option::take) {
            Some(g) => Ok(g),
            None => zeros_like(like),
        }
    }

    /// Takes the gradient of output `i`, if one reached it.
    pub fn take_output(&mut self, i: usize) -> Option<Tensor> {
        self.outputs.get_mut(i).and_then(Option::take)
    }

    /// The gradient of the single output of an op (the tape only runs a node whose output has
    /// one).
    pub fn single_output(&self) -> Result<Tensor> {
        self.outputs.first().cloned().flatten().ok_or_else(|| {
            CheckpointError::Autograd("backward reached an op without an output gradient".into())
        })
    }
}

fn zeros_like(like: &Tensor) -> Result<Tensor> {
    Ok(Tensor::zeros(
        like.shape().clone(),
        like.dtype(),
        like.device(),
        MemoryKind::Gradient,
    )?)
}

/// The backward half of an op with `N` input slots (absent optional inputs keep their slot).
/// Implementations live next to their forward in [`crate::ops`] and destructure the slots by
/// name (`let [x, weight, bias] = g.inputs;`).
pub trait Backward<const N: usize> {
    /// Op name for errors and profiles.
    fn name(&self) -> &'static str;
    /// Gradients of the inputs given the gradients of the outputs, one per slot: `None` where
    /// no gradient is wanted or it was accumulated into `params` (the parameter gradients of
    /// the step).
    fn backward(
        self,
        params: &mut Gradients,
        grads: BackwardGrads<[InputSlot; N]>,
    ) -> Result<[Option<Tensor>; N]>;
}

/// What the tape runs backward in: the context of the forward pass (`C` of [`BackwardOp`]),
/// which holds the [`Recorder`] of the step.
pub trait BackwardContext<'m>: Sized {
    /// The recorder whose parameter gradients and readers backward updates.
    fn recorder(&mut self) -> &mut Recorder<'m, Self>;
    /// Whether backward stops after the node that just ran (a chunked BatchNorm's
    /// gradient-sums pass stops once it has reached its BatchNorm).
    fn stops_backward(&self) -> bool;
}

/// The type-erased backward half the tape stores, run in context `C`; typed ops ([`Backward`])
/// reach it through a private adapter.
pub trait BackwardOp<'m, C> {
    /// Op name for errors and profiles.
    fn name(&self) -> &'static str;
    /// Gradients of the inputs given the gradients of the outputs. Returns one entry per input:
    /// `None` where no gradient is wanted or it was accumulated into a parameter gradient.
    fn backward(self: Box<Self>, cx: &mut C, grads: BackwardGrads) -> Result<Vec<Option<Tensor>>>;
}

/// A typed op seen through [`BackwardOp`].
pub(crate) struct Typed<T, const N: usize>(pub(crate) T);

impl<'m, C: BackwardContext<'m>, T: Backward<N>, const N: usize> BackwardOp<'m, C> for Typed<T, N> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn backward(self: Box<Self>, cx: &mut C, grads: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let typed = fixed_slots(self.0.name(), grads)?;
        Ok(self.0.backward(cx.recorder().gradients_mut(), typed)?.into())
    }
}

/// The slots of an op with `N` of them (a typed op, or one that implements [`BackwardOp`]
/// directly but has a fixed arity), checked against what the tape recorded.
pub(crate) fn fixed_slots<const N: usize>(
    name: &str,
    grads: BackwardGrads,
) -> Result<BackwardGrads<[InputSlot; N]>> {
    let inputs: [InputSlot; N] = grads.inputs.try_into().map_err(|v: Vec<InputSlot>| {
        CheckpointError::Autograd(format!(
            "op {name} has {N} input slots, the tape recorded {}",
            v.len()
        ))
    })?;
    Ok(BackwardGrads {
        outputs: grads.outputs,
        inputs,
    })
}
