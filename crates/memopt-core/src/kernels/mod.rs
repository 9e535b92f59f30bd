//! Kernels, forward and backward, as plain functions over tensors (no autograd here), each
//! with a CPU half and a CUDA half.
//!
//! Every kernel follows one pattern (see [`elementwise`]): validate shapes, dtypes and devices
//! and return a [`crate::CoreError`] naming the problem; allocate outputs and workspace through
//! [`crate::KernelBuffer`] on the calling thread, in the same order on every device; compute
//! only when the data is present: on the CPU in parallel with rayon where it pays, on a GPU
//! through the CUDA half. On Meta the same allocations and frees happen and nothing is computed. Forward outputs are recorded as
//! [`crate::MemoryKind::Activation`], backward outputs as [`crate::MemoryKind::Gradient`].

mod accum;
pub mod batch_norm;
pub mod conv;
pub mod dropout;
pub mod elementwise;
pub mod loss;
pub mod matmul;
pub mod neuron;
mod operand;
pub mod optim;
mod par;
pub mod pool;
pub mod reduce;
pub mod row_scale;
pub mod shape_ops;
pub mod split;
mod step_input;
#[cfg(test)]
mod stepwise_tests;
#[cfg(test)]
pub(crate) mod testkit;
mod tile;

/// Which gradients a backward kernel should compute; the others are not allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GradNeeds {
    /// Gradient of the input.
    pub input: bool,
    /// Gradient of the weight.
    pub weight: bool,
    /// Gradient of the bias (ignored when the op has none).
    pub bias: bool,
}

impl GradNeeds {
    /// All gradients.
    pub const ALL: GradNeeds = GradNeeds {
        input: true,
        weight: true,
        bias: true,
    };
}

/// Accumulators for the weight and bias gradients of a layer whose batch folds `time_steps`
/// time steps (`[T*N, ...]` rows or images). [`linear_backward`] and [`conv2d_backward`] given
/// accumulators add each time step's contribution into them, last time step first, so that
/// recomputing the time steps in chunks performs the same floating-point additions in the same order as one whole pass.
#[derive(Debug, Clone, Copy)]
pub struct WeightGradAcc<'a> {
    /// Weight gradient accumulator (same shape as the weight), if wanted.
    pub weight: Option<&'a crate::Tensor>,
    /// Bias gradient accumulator `[N]`, if wanted.
    pub bias: Option<&'a crate::Tensor>,
    /// Time steps folded into the batch (>= 1; must divide it).
    pub time_steps: usize,
}

impl WeightGradAcc<'_> {
    /// Checks the accumulators against the weight's shape, the bias length and the batch, and
    /// that they do not alias the kernel's inputs.
    pub(crate) fn check(
        &self,
        op: &'static str,
        w_dims: &[usize],
        n_out: usize,
        batch: usize,
        inputs: &[&crate::Tensor],
    ) -> crate::Result<usize> {
        use crate::{CoreError, DType};
        if self.time_steps == 0 || !batch.is_multiple_of(self.time_steps) {
            return Err(CoreError::invalid(
                op,
                format!(
                    "time_steps = {} must be >= 1 and divide the batch of {batch}",
                    self.time_steps
                ),
            ));
        }
        for (acc, dims) in [(self.weight, w_dims), (self.bias, &[n_out][..])] {
            let Some(acc) = acc else { continue };
            acc.expect_dtype(op, DType::F32)?;
            if acc.dims() != dims {
                return Err(CoreError::shape(
                    op,
                    format!("a gradient accumulator of shape {:?}", dims),
                    acc.shape(),
                ));
            }
            if let Some(t) = inputs.iter().find(|t| t.same_storage(acc)) {
                return Err(CoreError::invalid(
                    op,
                    format!("the accumulator shares storage with an input {}", t.shape()),
                ));
            }
            if let Some(first) = inputs.first() {
                first.expect_same_device(op, acc)?;
            }
        }
        Ok(batch / self.time_steps)
    }
}

pub use batch_norm::*;
pub use conv::*;
pub use dropout::*;
pub use elementwise::*;
pub use loss::*;
pub use matmul::*;
pub use neuron::*;
pub use operand::Operand;
pub use optim::*;
pub use pool::*;
pub use reduce::*;
pub use row_scale::*;
pub use shape_ops::*;
pub use split::*;
pub use step_input::StepInput;
