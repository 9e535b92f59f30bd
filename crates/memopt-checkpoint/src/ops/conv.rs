//! 2-D convolution.

use super::{GradTarget, layer_grads, weight_bias_targets};
use crate::Result;
use crate::autograd::{Backward, BackwardGrads, InputSlot, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::kernels::{self, Conv2dParams};
use memopt_core::{DType, Tensor};

/// Convolution of `x [B, C, H, W]` with `w [Co, C/groups, kh, kw]`. `time_steps` is the time
/// dimension folded into `B` (1 for non-temporal input): weight gradients accumulate one time
/// step at a time, last first, so chunked recomputation adds in the same order. When the output
/// is read by no one ([`Cx::take_output_unread`]) and the op records its backward (which keeps
/// `x` and `w`, not the output), nothing is computed: the output is an unmaterialised stand-in.
pub fn conv2d<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    p: &Conv2dParams,
    time_steps: usize,
) -> Result<Var> {
    let unread = cx.take_output_unread();
    let slots = [Some(x), Some(w), b];
    let (xt, wt, bt) = (x.tensor(), w.tensor(), b.map(Var::tensor));
    let y = if unread && cx.slots_need_grad(&slots) {
        Tensor::unmaterialised(
            kernels::conv2d_output_shape(xt, wt, bt, p)?,
            DType::F32,
            xt.device(),
        )?
    } else {
        kernels::conv2d(xt, wt, bt, p, time_steps)?
    };
    if !cx.slots_need_grad(&slots) {
        return Ok(Var::constant(y));
    }
    let op = ConvBackward {
        x: cx.save(x.tensor()),
        w: cx.save(w.tensor()),
        params: *p,
        time_steps,
    };
    Ok(cx.record1(op, slots, y))
}

struct ConvBackward {
    x: SavedTensor,
    w: SavedTensor,
    params: Conv2dParams,
    time_steps: usize,
}

impl<'m> Backward<'m, 3> for ConvBackward {
    fn name(&self) -> &'static str {
        "conv2d"
    }

    fn backward(self, cx: &mut Cx<'m>, g: BackwardGrads<[InputSlot; 3]>) -> Result<[Option<Tensor>; 3]> {
        let grad = g.single_output()?;
        let (x, w) = (self.x.tensor(), self.w.tensor());
        let [x_slot, w_slot, b_slot] = g.inputs;
        let (wt, bt) = weight_bias_targets(cx, w_slot, b_slot, w)?;
        let gx = kernels::conv2d_backward(kernels::Conv2dBackward {
            grad: &grad,
            x,
            w,
            has_bias: b_slot.needs_grad,
            params: &self.params,
            needs: kernels::GradNeeds {
                input: x_slot.needs_grad,
                weight: w_slot.needs_grad,
                bias: b_slot.needs_grad,
            },
            acc: Some(kernels::WeightGradAcc {
                weight: wt.as_ref().map(GradTarget::acc),
                bias: bt.as_ref().map(GradTarget::acc),
                time_steps: self.time_steps,
            }),
        })?
        .x;
        Ok(layer_grads(gx, wt, bt))
    }
}
