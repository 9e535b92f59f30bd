//! A tensor kept by the tape for backward.

use memopt_core::{MemoryKind, Tensor};

/// A tensor an op keeps for its backward. Saving re-tags activations as
/// [`MemoryKind::SavedForBackward`] (parameters, inputs and buffers keep their kind); the tensor
/// is released when the op's backward has run.
#[derive(Debug, Clone)]
pub struct SavedTensor(Tensor);

impl SavedTensor {
    pub(crate) fn new(t: &Tensor) -> SavedTensor {
        if t.kind() == MemoryKind::Activation {
            t.set_kind(MemoryKind::SavedForBackward);
        }
        SavedTensor(t.clone())
    }

    /// The saved tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}
