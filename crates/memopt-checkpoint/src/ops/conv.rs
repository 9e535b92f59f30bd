//! 2-D convolution.

use super::{GradTarget, layer_grads, single_grad, weight_bias_targets};
use crate::Result;
use crate::autograd::{BackwardGrads, BackwardOp, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::Tensor;
use memopt_core::kernels::{self, Conv2dParams};

/// Convolution of `x [B, C, H, W]` with `w [Co, C/groups, kh, kw]`. `time_steps` is the time
/// dimension folded into `B` (1 for non-temporal input): weight gradients accumulate one time
/// step at a time, last first, so chunked recomputation adds in the same order.
pub fn conv2d<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    p: &Conv2dParams,
    time_steps: usize,
) -> Result<Var> {
    let y = kernels::conv2d_steps(x.tensor(), w.tensor(), b.map(Var::tensor), p, time_steps)?;
    let mut inputs = vec![x, w];
    inputs.extend(b);
    if !cx.needs_grad(&inputs) {
        return Ok(Var::constant(y));
    }
    let op = ConvBackward {
        x: cx.save(x.tensor()),
        w: cx.save(w.tensor()),
        has_bias: b.is_some(),
        params: *p,
        time_steps,
    };
    Ok(cx.record1(op, &inputs, y))
}

struct ConvBackward {
    x: SavedTensor,
    w: SavedTensor,
    has_bias: bool,
    params: Conv2dParams,
    time_steps: usize,
}

impl<'m> BackwardOp<'m> for ConvBackward {
    fn name(&self) -> &'static str {
        "conv2d"
    }

    fn backward(self: Box<Self>, cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let grad = single_grad(&g)?;
        let (x, w) = (self.x.tensor(), self.w.tensor());
        let (wt, bt) = weight_bias_targets(cx, &g, w, self.has_bias)?;
        let gx = kernels::conv2d_backward_acc(
            &grad,
            x,
            w,
            &self.params,
            kernels::WeightGradAcc {
                weight: wt.as_ref().map(GradTarget::acc),
                bias: bt.as_ref().map(GradTarget::acc),
                time_steps: self.time_steps,
            },
            g.input_needs[0],
        )?;
        Ok(layer_grads(gx, wt, bt, self.has_bias))
    }
}
