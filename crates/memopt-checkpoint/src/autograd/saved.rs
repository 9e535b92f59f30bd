//! A tensor kept by the tape for backward.

use super::Var;
use super::var::Value;
use crate::Result;
use memopt_compress::PackedSpikes;
use memopt_core::{DType, MemoryKind, Tensor};

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

/// What a convolution or linear layer keeps of its input for the weight gradient: the tensor,
/// or f32 spikes kept bit-packed ([`PackedSpikes`], payload of kind
/// [`MemoryKind::Packed`]), which the stepwise backward kernels read one time step at a time.
#[derive(Debug, Clone)]
pub enum SavedLayerInput {
    /// The tensor (re-tagged saved-for-backward when it was an activation).
    Tensor(SavedTensor),
    /// Bit-packed spikes (shared with the value they came from).
    Packed(PackedSpikes),
}

impl SavedLayerInput {
    /// Keeps `x`: packed spikes stay packed; with `pack`, an f32 tensor with the spike flag is
    /// packed into a new payload; any other tensor is saved as it is.
    pub(crate) fn of(x: &Var, pack: bool) -> Result<SavedLayerInput> {
        Ok(match x.value() {
            Value::Packed(p) => SavedLayerInput::Packed(p.clone()),
            Value::Dense(t) if pack && t.is_spike() && t.dtype() == DType::F32 => {
                SavedLayerInput::Packed(PackedSpikes::pack(t)?)
            }
            Value::Dense(t) => SavedLayerInput::Tensor(SavedTensor::new(t)),
        })
    }
}
