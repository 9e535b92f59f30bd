//! Bool/U8: 1 byte per value.

use crate::binary::{self, ByteCodec};
use crate::compressor::elems;
use crate::cpu::{self, SpikeElem};
use crate::cuda::CudaKernels;
use crate::{Compressor, CompressorKind, Packed, PackedSize, Result};
use memopt_core::{DType, Shape, Tensor};

/// 1 byte (0 or 1) per value, row-major, like a `bool` array. Binary f32/f16/bf16 input; CPU,
/// Meta and CUDA.
#[derive(Debug, Clone, Copy, Default)]
pub struct BoolU8;

impl ByteCodec for BoolU8 {
    const KIND: CompressorKind = CompressorKind::U8;
    const PACK_OP: &'static str = "u8 compress";
    const UNPACK_OP: &'static str = "u8 decompress";
    const CUDA: CudaKernels = CudaKernels {
        table: &crate::cuda::BYTES_TABLE,
        pack: ["bytes_pack_f32", "bytes_pack_f16", "bytes_pack_bf16"],
        unpack: ["bytes_unpack_f32", "bytes_unpack_f16", "bytes_unpack_bf16"],
    };
    fn payload_len(n: usize) -> usize {
        n
    }
    fn pack<E: SpikeElem>(src: &[E], dst: &mut [u8], check: bool) -> Result<()> {
        cpu::pack_bytes(src, dst, check)
    }
    fn unpack<E: SpikeElem>(src: &[u8], dst: &mut [E]) -> Result<()> {
        cpu::unpack_bytes(src, dst)
    }
}

impl Compressor for BoolU8 {
    fn kind(&self) -> CompressorKind {
        CompressorKind::U8
    }

    /// One byte per element, whatever the dtype.
    fn packed_size(&self, shape: &Shape, _dtype: DType) -> PackedSize {
        PackedSize::Exact(elems(shape))
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        binary::compress::<BoolU8>(x)
    }

    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        binary::decompress::<BoolU8>(packed)
    }
}
