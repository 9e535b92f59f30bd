//! The [`Compressor`] trait and the checks every implementation shares.

use crate::{CompressError, CompressorKind, Packed, PackedSize, Result};
use memopt_core::{DType, Shape, Tensor};

/// Compresses tensors to a tracked payload and back.
///
/// Implementations allocate through memopt-core's tracker only (payloads with kind
/// [`memopt_core::MemoryKind::Packed`], temporaries as workspace, decompressed tensors as
/// [`memopt_core::MemoryKind::Activation`]), on the calling thread, in the same order on every
/// device, so that the Meta device records exactly what the CPU records.
pub trait Compressor: Send + Sync + std::fmt::Debug {
    /// Which compressor this is.
    fn kind(&self) -> CompressorKind;

    /// Payload size for a tensor of this shape and dtype without looking at data (bytes).
    fn packed_size(&self, shape: &Shape, dtype: DType) -> PackedSize;

    /// Compresses `x`. Binary compressors check that every value is 0 or 1 unless `x` carries
    /// the spike flag.
    fn compress(&self, x: &Tensor) -> Result<Packed>;

    /// Recreates the original (shape, dtype, device, spike flag); recorded as
    /// [`memopt_core::MemoryKind::Activation`].
    fn decompress(&self, packed: &Packed) -> Result<Tensor>;
}

/// The dtypes binary and half compressors accept.
pub(crate) const FLOAT_DTYPES: &str = "f32, f16, bf16";

/// Checks that `x` is f32, f16 or bf16.
pub(crate) fn expect_float(compressor: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(CompressError::WrongDType {
            compressor,
            got: dtype,
            accepted: FLOAT_DTYPES,
        })
    }
}

/// Checks that `packed` was made by `kind`.
pub(crate) fn expect_kind(packed: &Packed, kind: CompressorKind) -> Result<()> {
    if packed.kind() == kind {
        Ok(())
    } else {
        Err(CompressError::Mismatch {
            packed: packed.kind(),
            compressor: kind,
        })
    }
}

/// `to` when it holds as many elements as `from` (a reshape of packed values, whose payloads are
/// row-major), else the shape error of op `op`.
pub(crate) fn reshaped(op: &'static str, from: &Shape, to: Shape) -> Result<Shape> {
    if to.checked_elem_count() == Some(from.elem_count()) {
        return Ok(to);
    }
    Err(memopt_core::CoreError::shape(
        op,
        format!("a shape with {} elements (from {from})", from.elem_count()),
        &to,
    )
    .into())
}

/// Elements of a shape as u64 (bytes arithmetic).
pub(crate) fn elems(shape: &Shape) -> u64 {
    shape.elem_count() as u64
}
