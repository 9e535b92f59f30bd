//! CPU kernels, forward and backward, as plain functions over tensors (no autograd here).
//!
//! Every kernel follows one pattern (see [`elementwise`]): validate shapes, dtypes and devices
//! and return a [`crate::CoreError`] naming the problem; allocate outputs and workspace through
//! [`crate::KernelBuffer`] on the calling thread, in the same order on every device; compute
//! only when the data is present (CPU), in parallel with rayon where it pays. On Meta the same
//! allocations and frees happen and nothing is computed. Forward outputs are recorded as
//! [`crate::MemoryKind::Activation`], backward outputs as [`crate::MemoryKind::Gradient`].

mod accum;
pub mod batch_norm;
pub mod conv;
pub mod dropout;
pub mod elementwise;
pub mod loss;
pub mod matmul;
pub mod neuron;
pub mod optim;
mod par;
pub mod pool;
pub mod reduce;
pub mod shape_ops;
#[cfg(test)]
pub(crate) mod testkit;

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

pub use batch_norm::*;
pub use conv::*;
pub use dropout::*;
pub use elementwise::*;
pub use loss::*;
pub use matmul::*;
pub use neuron::*;
pub use optim::*;
pub use pool::*;
pub use reduce::*;
pub use shape_ops::*;
