//! 2-D convolution.

use super::{GradTarget, layer_grads, weight_bias_targets};
use crate::Result;
use crate::autograd::{
    Backward, BackwardGrads, Gradients, InputSlot, LayerInputRead, Record, SavedLayerInput, SavedTensor, Var,
};
use crate::context::Cx;
use memopt_core::kernels::{self, Conv2dParams};
use memopt_core::{DType, Tensor};

/// Convolution of `x [B, C, H, W]` with `w [Co, C/groups, kh, kw]`. `time_steps` is the time
/// dimension folded into `B` (1 for non-temporal input): weight gradients accumulate one time
/// step at a time, last first, so chunked recomputation adds in the same order. An `x` holding
/// bit-packed spikes is read one time step at a time (forward and weight gradient) and kept
/// packed for backward, so its f32 form never exists whole. When the output is read by no one
/// ([`Cx::take_output_unread`]) and the op records its backward (which keeps `x` and `w`, not the
/// output), nothing is computed: the output is an unmaterialised stand-in.
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
    let (wt, bt) = (w.tensor()?, b.map(Var::tensor).transpose()?);
    let y = if unread && cx.slots_need_grad(&slots) {
        let shape = match x.as_dense() {
            Some(xt) => kernels::conv2d_output_shape(xt, &wt, bt.as_deref(), p)?,
            // Packed spikes: the geometry of an element-less stand-in of their f32 form.
            None => {
                let xs = Tensor::unmaterialised(x.shape().clone(), DType::F32, x.device())?;
                kernels::conv2d_output_shape(&xs, &wt, bt.as_deref(), p)?
            }
        };
        Tensor::unmaterialised(shape, DType::F32, x.device())?
    } else {
        match x.as_packed() {
            Some(spikes) => kernels::conv2d_stepwise(spikes, &wt, bt.as_deref(), p, time_steps)?,
            None => kernels::conv2d(&*x.tensor()?, &wt, bt.as_deref(), p, time_steps)?,
        }
    };
    if !cx.slots_need_grad(&slots) {
        return Ok(Var::constant(y));
    }
    let op = ConvBackward {
        x: cx.save_layer_input(x)?,
        w: cx.save(&wt),
        params: *p,
        time_steps,
    };
    Ok(cx.record(Record::new(op, slots), y))
}

struct ConvBackward {
    x: SavedLayerInput,
    w: SavedTensor,
    params: Conv2dParams,
    time_steps: usize,
}

impl Backward<3> for ConvBackward {
    fn name(&self) -> &'static str {
        "conv2d"
    }

    fn backward(
        self,
        params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 3]>,
    ) -> Result<[Option<Tensor>; 3]> {
        let grad = g.single_output()?;
        let w = self.w.tensor();
        let [x_slot, w_slot, b_slot] = g.inputs;
        let (wt, bt) = weight_bias_targets(params, w_slot, b_slot, w)?;
        let acc = kernels::WeightGradAcc {
            weight: wt.as_ref().map(GradTarget::acc),
            bias: bt.as_ref().map(GradTarget::acc),
            time_steps: self.time_steps,
        };
        let gx = match self.x.read()? {
            LayerInputRead::Whole(x) => {
                kernels::conv2d_backward(kernels::Conv2dBackward {
                    grad: &grad,
                    x: &x,
                    w,
                    has_bias: b_slot.needs_grad,
                    params: &self.params,
                    needs: kernels::GradNeeds {
                        input: x_slot.needs_grad,
                        weight: w_slot.needs_grad,
                        bias: b_slot.needs_grad,
                    },
                    acc: Some(acc),
                })?
                .x
            }
            LayerInputRead::Steps(x) => kernels::conv2d_backward_stepwise(kernels::Conv2dBackwardStepwise {
                grad: &grad,
                x,
                w,
                params: &self.params,
                input: x_slot.needs_grad,
                acc,
            })?,
        };
        Ok(layer_grads(gx, wt, bt))
    }
}
