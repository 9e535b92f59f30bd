//! The null compressor: keeps the tensor as it is.

use crate::compressor::{elems, expect_kind};
use crate::{Compressor, CompressorKind, Packed, PackedSize, Result};
use memopt_core::{DType, Shape, Tensor};

/// Keeps the original tensor: no copy, no allocation, any dtype and device. Its "payload" is
/// the tensor itself, so its size is the tensor's bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullCompressor;

impl Compressor for NullCompressor {
    fn kind(&self) -> CompressorKind {
        CompressorKind::Null
    }

    fn packed_size(&self, shape: &Shape, dtype: DType) -> PackedSize {
        PackedSize::Exact(elems(shape) * dtype.size_in_bytes() as u64)
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        Ok(Packed::new(CompressorKind::Null, x.clone(), x))
    }

    /// Returns the original tensor (shared, not copied; its memory kind is unchanged).
    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        expect_kind(packed, CompressorKind::Null)?;
        Ok(packed.payload().with_known_values(packed.known_values()))
    }
}
