//! 2-D convolution, and 1-D convolution as its one-column case.

use super::{GradTarget, layer_grads, weight_bias_targets};
use crate::Result;
use crate::autograd::{
    Backward, BackwardGrads, Gradients, InputSlot, LayerInputRead, Record, SavedLayerInput, SavedTensor, Var,
};
use crate::context::Cx;
use memopt_core::kernels::{self, Conv2dParams};
use memopt_core::{DType, Shape, Tensor};

/// Hyper-parameters of a 1-d convolution, as in PyTorch's `nn.Conv1d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv1dParams {
    /// Step between output positions, in input positions; at least 1.
    pub stride: usize,
    /// Zeros added on both sides, in positions.
    pub padding: usize,
    /// Spacing between kernel taps, in input positions; at least 1.
    pub dilation: usize,
    /// Number of channel groups; divides both the input and the output channels.
    pub groups: usize,
}

impl Default for Conv1dParams {
    /// Stride 1, no padding, dilation 1, one group.
    fn default() -> Self {
        Conv1dParams {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
        }
    }
}

impl Conv1dParams {
    /// The same convolution over `[.., L, 1]` planes: a `k x 1` kernel that never moves along
    /// the width.
    pub fn as_2d(&self) -> Conv2dParams {
        Conv2dParams {
            stride: [self.stride, 1],
            padding: [self.padding, 0],
            dilation: [self.dilation, 1],
            groups: self.groups,
        }
    }
}

/// Convolution of `x [B, C, L]` with `w [Co, C/groups, k]`: the 2-d convolution of the
/// `[B, C, L, 1]` view with the `[Co, C/groups, k, 1]` view of `w`, so its sums are the same
/// chains of fused multiply-adds. The weight stays a parameter of its own shape: its gradient
/// accumulates into the parameter's `[Co, C/groups, k]` accumulator through a view.
pub fn conv1d<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    p: &Conv1dParams,
    time_steps: usize,
) -> Result<Var> {
    let (xd, wd) = (x.dims().to_vec(), w.dims().to_vec());
    let (&[bn, c, l], &[co, ci, k]) = (&xd[..], &wd[..]) else {
        return Err(crate::CheckpointError::InvalidInput(format!(
            "conv1d takes x [B, C, L] and w [C_out, C_in / groups, k], got x {} and w {}",
            x.shape(),
            w.shape()
        )));
    };
    let x2 = super::reshape(cx, x, vec![bn, c, l, 1])?;
    let y = conv(cx, &x2, w, &[co, ci, k, 1], b, &p.as_2d(), time_steps)?;
    let yd = y.dims().to_vec();
    super::reshape(cx, &y, yd[..3].to_vec())
}

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
    conv(cx, x, w, w.dims(), b, p, time_steps)
}

/// The convolution of `x` with `w` read as a `kernel_dims` (4-d) view.
fn conv<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    w: &Var,
    kernel_dims: &[usize],
    b: Option<&Var>,
    p: &Conv2dParams,
    time_steps: usize,
) -> Result<Var> {
    let unread = cx.take_output_unread();
    let slots = [Some(x), Some(w), b];
    let weight_dims = w.shape().clone();
    let (wt, bt) = (
        w.tensor()?.reshape(kernel_dims.to_vec())?,
        b.map(Var::tensor).transpose()?,
    );
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
        weight_dims,
        params: *p,
        time_steps,
    };
    Ok(cx.record(Record::new(op, slots), y))
}

struct ConvBackward {
    x: SavedLayerInput,
    /// The weight as the kernel reads it (4-d).
    w: SavedTensor,
    /// The weight's own shape, which its gradient takes.
    weight_dims: Shape,
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
        let (wt, bt) = weight_bias_targets(params, w_slot, b_slot, self.weight_dims.dims(), w.device())?;
        // The kernel adds into a 4-d view of the accumulator (the same storage).
        let weight_acc = wt
            .as_ref()
            .map(|t| t.acc().reshape(w.shape().clone()))
            .transpose()?;
        let acc = kernels::WeightGradAcc {
            weight: weight_acc.as_ref(),
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
