//! A compressed tensor.

use crate::{CompressorKind, Result};
use memopt_core::{DType, Device, KnownValues, MemoryKind, Shape, Tensor};

/// A tensor in compressed form: the payload (tracked with kind [`memopt_core::MemoryKind::Packed`];
/// for the null compressor the original tensor itself, not copied) and what is needed to
/// recreate the original: shape, dtype, device, what is known about its values (spike flag,
/// pooled spikes) and the compressor that made it.
/// Clones share the payload.
#[derive(Debug, Clone)]
pub struct Packed {
    kind: CompressorKind,
    payload: Tensor,
    shape: Shape,
    dtype: DType,
    values: KnownValues,
}

impl Packed {
    /// Wraps a payload made by `kind` from `original`.
    pub(crate) fn new(kind: CompressorKind, payload: Tensor, original: &Tensor) -> Packed {
        Packed {
            kind,
            payload,
            shape: original.shape().clone(),
            dtype: original.dtype(),
            values: original.known_values(),
        }
    }

    /// Bytes held by the payload (the original's bytes for the null compressor).
    pub fn payload_bytes(&self) -> u64 {
        self.payload.view_bytes()
    }

    /// The payload tensor (1-D bytes or indices, or a half-precision copy; the original tensor
    /// for the null compressor).
    pub fn payload(&self) -> &Tensor {
        &self.payload
    }

    /// Shape of the original tensor.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Dtype of the original tensor.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Device of the original tensor (and of the payload).
    pub fn device(&self) -> Device {
        self.payload.device()
    }

    /// The compressor that made this.
    pub fn kind(&self) -> CompressorKind {
        self.kind
    }

    /// Whether the original tensor carried the spike flag (restored by decompression).
    pub fn is_spike(&self) -> bool {
        self.values == KnownValues::Spikes
    }

    /// What was known about the original's values (restored by decompression).
    pub fn known_values(&self) -> KnownValues {
        self.values
    }

    /// The same packed tensor with its payload copied to `device` and recorded there with
    /// `kind` (the offload policy moves payloads to host memory and back).
    pub fn to_device(&self, device: Device, kind: MemoryKind) -> Result<Packed> {
        Ok(Packed {
            payload: self.payload.to_device_as(device, kind)?,
            ..self.clone()
        })
    }

    /// The same packed values with another shape of the same element count (every payload is
    /// row-major, so this is a view sharing the payload).
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Packed> {
        Ok(Packed {
            shape: crate::compressor::reshaped("Packed::reshape", &self.shape, shape.into())?,
            ..self.clone()
        })
    }

    /// Decompresses with the compressor that made this.
    pub fn decompress(&self) -> Result<Tensor> {
        self.kind.build().decompress(self)
    }
}
