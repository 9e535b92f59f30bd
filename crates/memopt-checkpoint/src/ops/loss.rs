//! Losses.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::{Tensor, kernels};

/// Cross-entropy of `logits [N, C]` against i64 `labels [N]`, averaged over the batch.
pub fn cross_entropy<'m>(cx: &mut Cx<'m>, logits: &Var, labels: &Tensor) -> Result<Var> {
    let lt = logits.tensor()?;
    let y = kernels::cross_entropy(&lt, labels)?;
    if !cx.needs_grad(&[logits]) {
        return Ok(Var::constant(y));
    }
    let op = CrossEntropyBackward {
        logits: cx.save(&lt),
        labels: cx.save(labels),
    };
    Ok(cx.record(Record::new(op, [Some(logits)]), y))
}

struct CrossEntropyBackward {
    logits: SavedTensor,
    labels: SavedTensor,
}

impl Backward<1> for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross_entropy"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::cross_entropy_backward(
            &grad,
            self.logits.tensor(),
            self.labels.tensor(),
        )?)])
    }
}

/// Mean squared error of `pred` against `target` (same shapes).
pub fn mse<'m>(cx: &mut Cx<'m>, pred: &Var, target: &Tensor) -> Result<Var> {
    let pt = pred.tensor()?;
    let y = kernels::mse(&pt, target)?;
    if !cx.needs_grad(&[pred]) {
        return Ok(Var::constant(y));
    }
    let op = MseBackward {
        pred: cx.save(&pt),
        target: cx.save(target),
    };
    Ok(cx.record(Record::new(op, [Some(pred)]), y))
}

struct MseBackward {
    pred: SavedTensor,
    target: SavedTensor,
}

impl Backward<1> for MseBackward {
    fn name(&self) -> &'static str {
        "mse"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::mse_backward(
            &grad,
            self.pred.tensor(),
            self.target.tensor(),
        )?)])
    }
}
