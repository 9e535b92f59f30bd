//! A tensor kept by the tape for backward.

use super::Var;
use super::var::Value;
use crate::Result;
use memopt_compress::{Compressor, Packed, PackedSpikes, SpikeCounts};
use memopt_core::{DType, KnownValues, MemoryKind, Tensor};
use std::borrow::Cow;

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
/// f32 spikes kept bit-packed ([`PackedSpikes`], payload of kind [`MemoryKind::Packed`]),
/// which the stepwise backward kernels read one time step at a time, or pooled spikes kept as
/// spike counts ([`SpikeCounts`], one byte per value: a checkpointed segment's restored input,
/// or packed under `Policy::StorePacked`), decompressed whole for the backward.
#[derive(Debug, Clone)]
pub enum SavedLayerInput {
    /// The tensor (re-tagged saved-for-backward when it was an activation).
    Tensor(SavedTensor),
    /// Bit-packed spikes (shared with the value they came from).
    Packed(PackedSpikes),
    /// Pooled spikes as spike counts.
    Counts(Packed),
}

/// How a backward reads a [`SavedLayerInput`].
pub enum LayerInputRead<'a> {
    /// Whole: the saved tensor, or the spike counts decompressed into a new activation (freed
    /// when the reader drops it).
    Whole(Cow<'a, Tensor>),
    /// Bit-packed spikes, one time step at a time.
    Steps(&'a PackedSpikes),
}

impl SavedLayerInput {
    /// Keeps `x`: packed spikes stay packed, spike counts (a checkpointed segment's restored
    /// input) stay counts; with `pack`, an f32 tensor with the spike flag is packed into a new
    /// payload, and f32 pooled spikes become spike counts (one byte per value); any other tensor
    /// is saved as it is.
    pub(crate) fn of(x: &Var, pack: bool) -> Result<SavedLayerInput> {
        Ok(match x.value() {
            Value::Packed(p) => SavedLayerInput::Packed(p.clone()),
            Value::Counts(p) => SavedLayerInput::Counts(p.clone()),
            Value::Dense(t) if pack && t.is_spike() && t.dtype() == DType::F32 => {
                SavedLayerInput::Packed(PackedSpikes::pack(t)?)
            }
            Value::Dense(t)
                if pack
                    && t.dtype() == DType::F32
                    && matches!(t.known_values(), KnownValues::PooledSpikes { .. }) =>
            {
                SavedLayerInput::Counts(SpikeCounts.compress(t)?)
            }
            Value::Dense(t) => SavedLayerInput::Tensor(SavedTensor::new(t)),
        })
    }

    /// The input as one tensor: bit-packed spikes are unpacked into a temporary (for ops that
    /// read all of it at once, such as batched products).
    pub fn whole(&self) -> Result<Cow<'_, Tensor>> {
        Ok(match self.read()? {
            LayerInputRead::Whole(t) => t,
            LayerInputRead::Steps(p) => Cow::Owned(p.unpack()?),
        })
    }

    /// The input as its backward reads it.
    pub fn read(&self) -> Result<LayerInputRead<'_>> {
        Ok(match self {
            SavedLayerInput::Tensor(t) => LayerInputRead::Whole(Cow::Borrowed(t.tensor())),
            SavedLayerInput::Counts(p) => LayerInputRead::Whole(Cow::Owned(SpikeCounts.decompress(p)?)),
            SavedLayerInput::Packed(p) => LayerInputRead::Steps(p),
        })
    }
}
