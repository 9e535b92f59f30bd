//! Fully connected layer.

use super::{GradTarget, layer_grads, weight_bias_targets};
use crate::Result;
use crate::autograd::{
    Backward, BackwardGrads, Gradients, InputSlot, LayerInputRead, Record, SavedLayerInput, SavedTensor, Var,
};
use crate::context::Cx;
use memopt_core::{Tensor, kernels};

/// `x [.., K] · wᵀ + b` with `w [N, K]`. `time_steps` is the leading time dimension folded
/// into the rows (1 for non-temporal input): weight gradients accumulate one time step at a
/// time, last first, so chunked recomputation adds in the same order. An `x` holding bit-packed
/// spikes is read one time step at a time (forward and weight gradient) and kept packed for
/// backward, so its f32 form never exists whole.
pub fn linear<'m>(cx: &mut Cx<'m>, x: &Var, w: &Var, b: Option<&Var>, time_steps: usize) -> Result<Var> {
    let (wt, bt) = (w.tensor()?, b.map(Var::tensor).transpose()?);
    let y = match x.as_packed() {
        Some(spikes) => kernels::linear_stepwise(spikes, &wt, bt.as_deref(), time_steps)?,
        None => kernels::linear(&*x.tensor()?, &wt, bt.as_deref(), time_steps)?,
    };
    let slots = [Some(x), Some(w), b];
    if !cx.slots_need_grad(&slots) {
        return Ok(Var::constant(y));
    }
    let op = LinearBackward {
        x: cx.save_layer_input(x)?,
        w: cx.save(&wt),
        time_steps,
    };
    Ok(cx.record(Record::new(op, slots), y))
}

struct LinearBackward {
    x: SavedLayerInput,
    w: SavedTensor,
    time_steps: usize,
}

impl Backward<3> for LinearBackward {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn backward(
        self,
        params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 3]>,
    ) -> Result<[Option<Tensor>; 3]> {
        let grad = g.single_output()?;
        let w = self.w.tensor();
        let [x_slot, w_slot, b_slot] = g.inputs;
        let (wt, bt) = weight_bias_targets(params, w_slot, b_slot, w.dims(), w.device())?;
        let acc = kernels::WeightGradAcc {
            weight: wt.as_ref().map(GradTarget::acc),
            bias: bt.as_ref().map(GradTarget::acc),
            time_steps: self.time_steps,
        };
        let gx = match self.x.read()? {
            LayerInputRead::Whole(x) => {
                kernels::linear_backward(kernels::LinearBackward {
                    grad: &grad,
                    x: &x,
                    w,
                    has_bias: b_slot.needs_grad,
                    needs: kernels::GradNeeds {
                        input: x_slot.needs_grad,
                        weight: w_slot.needs_grad,
                        bias: b_slot.needs_grad,
                    },
                    acc: Some(acc),
                })?
                .x
            }
            LayerInputRead::Steps(x) => kernels::linear_backward_stepwise(kernels::LinearBackwardStepwise {
                grad: &grad,
                x,
                w,
                input: x_slot.needs_grad,
                acc,
            })?,
        };
        Ok(layer_grads(gx, wt, bt))
    }
}
