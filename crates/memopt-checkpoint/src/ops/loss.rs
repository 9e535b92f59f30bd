//! Losses.

use super::single_grad;
use crate::Result;
use crate::autograd::{BackwardGrads, BackwardOp, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::{Tensor, kernels};

/// Cross-entropy of `logits [N, C]` against i64 `labels [N]`, averaged over the batch.
pub fn cross_entropy<'m>(cx: &mut Cx<'m>, logits: &Var, labels: &Tensor) -> Result<Var> {
    let y = kernels::cross_entropy(logits.tensor(), labels)?;
    if !cx.needs_grad(&[logits]) {
        return Ok(Var::constant(y));
    }
    let op = CrossEntropyBackward {
        logits: cx.save(logits.tensor()),
        labels: cx.save(labels),
    };
    Ok(cx.record1(op, &[logits], y))
}

struct CrossEntropyBackward {
    logits: SavedTensor,
    labels: SavedTensor,
}

impl<'m> BackwardOp<'m> for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross_entropy"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let grad = single_grad(&g)?;
        Ok(vec![Some(kernels::cross_entropy_backward(
            &grad,
            self.logits.tensor(),
            self.labels.tensor(),
        )?)])
    }
}

/// Mean squared error of `pred` against `target` (same shapes).
pub fn mse<'m>(cx: &mut Cx<'m>, pred: &Var, target: &Tensor) -> Result<Var> {
    let y = kernels::mse(pred.tensor(), target)?;
    if !cx.needs_grad(&[pred]) {
        return Ok(Var::constant(y));
    }
    let op = MseBackward {
        pred: cx.save(pred.tensor()),
        target: cx.save(target),
    };
    Ok(cx.record1(op, &[pred], y))
}

struct MseBackward {
    pred: SavedTensor,
    target: SavedTensor,
}

impl<'m> BackwardOp<'m> for MseBackward {
    fn name(&self) -> &'static str {
        "mse"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let grad = single_grad(&g)?;
        Ok(vec![Some(kernels::mse_backward(
            &grad,
            self.pred.tensor(),
            self.target.tensor(),
        )?)])
    }
}
