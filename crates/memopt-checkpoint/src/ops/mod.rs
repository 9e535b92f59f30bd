//! Differentiable ops: each forward calls a memopt-core kernel and, when a gradient is needed,
//! records a backward op defined next to it that holds exactly what its backward reads.

mod batched_matmul;
mod conv;
mod dropout;
mod elementwise;
mod linear;
mod loss;
mod neuron;
mod norm;
mod norm_chunk;
mod pool;
mod reduce;
mod row_scale;
mod shape;
mod split;

pub use batched_matmul::batched_matmul;
pub use conv::{Conv1dParams, conv1d, conv2d};
pub use dropout::dropout;
pub use elementwise::{add, mul, relu, scale, sigmoid};
pub use linear::linear;
pub use loss::{cross_entropy, mse};
pub use neuron::neuron;
pub use norm::batch_norm;
pub use pool::{adaptive_avg_pool2d, avg_pool2d, max_pool2d};
pub use reduce::{mean_all, mean_dim, sum_all, sum_dim};
pub use row_scale::scale_rows;
pub use shape::reshape;
pub use split::split;

use crate::Result;
use crate::autograd::{Gradients, InputSlot};
use memopt_core::{DType, Device, MemoryKind, Tensor};

/// Where the gradient of a weight-like input goes: a parameter's accumulator, or a fresh zeroed
/// tensor returned to the tape.
pub(crate) struct GradTarget {
    acc: Tensor,
    is_param: bool,
}

impl GradTarget {
    /// The target for the input in `slot`, of shape `dims`, if its gradient is wanted.
    pub(crate) fn for_slot(
        params: &mut Gradients,
        slot: InputSlot,
        dims: &[usize],
        device: Device,
    ) -> Result<Option<GradTarget>> {
        if !slot.needs_grad {
            return Ok(None);
        }
        Ok(Some(match slot.param {
            Some(p) => GradTarget {
                acc: params.accumulator(p, dims, device)?,
                is_param: true,
            },
            None => GradTarget {
                acc: Tensor::zeros(dims, DType::F32, device, MemoryKind::Gradient)?,
                is_param: false,
            },
        }))
    }

    /// The accumulator to add into.
    pub(crate) fn acc(&self) -> &Tensor {
        &self.acc
    }

    /// What to return to the tape: nothing for a parameter (already accumulated).
    pub(crate) fn into_returned(self) -> Option<Tensor> {
        (!self.is_param).then_some(self.acc)
    }
}

/// Gradient targets of a layer's weight of shape `w_dims` and bias (`[w_dims[0]]`), from their
/// slots (an absent bias's slot wants no gradient).
pub(crate) fn weight_bias_targets(
    params: &mut Gradients,
    weight: InputSlot,
    bias: InputSlot,
    w_dims: &[usize],
    device: Device,
) -> Result<(Option<GradTarget>, Option<GradTarget>)> {
    let wt = GradTarget::for_slot(params, weight, w_dims, device)?;
    let bt = GradTarget::for_slot(params, bias, &w_dims[..1], device)?;
    Ok((wt, bt))
}

/// The input gradients of a layer with slots (x, weight, bias): parameters' gradients were
/// accumulated in place and are not returned.
pub(crate) fn layer_grads(
    gx: Option<Tensor>,
    wt: Option<GradTarget>,
    bt: Option<GradTarget>,
) -> [Option<Tensor>; 3] {
    [
        gx,
        wt.and_then(GradTarget::into_returned),
        bt.and_then(GradTarget::into_returned),
    ]
}
