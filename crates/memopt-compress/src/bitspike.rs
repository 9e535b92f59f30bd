//! BitSpike: 1 bit per value.

use crate::binary::{self, ByteCodec};
use crate::compressor::elems;
use crate::cpu::{self, SpikeElem};
use crate::cuda::CudaKernels;
use crate::{Compressor, CompressorKind, Packed, PackedSize, Result};
use memopt_core::{DType, Shape, Tensor};

/// 1 bit per value, bit-exact with numpy `packbits(x.ravel(), bitorder='little')`: value `8j+i`
/// (row-major) is bit `i` (LSB first) of byte `j`, the last byte zero-padded; the element count
/// comes from the shape. Binary f32/f16/bf16 input; CPU, Meta and CUDA.
#[derive(Debug, Clone, Copy, Default)]
pub struct BitSpike;

impl ByteCodec for BitSpike {
    const KIND: CompressorKind = CompressorKind::BitSpike;
    const PACK_OP: &'static str = "bit_spike compress";
    const UNPACK_OP: &'static str = "bit_spike decompress";
    const CUDA: CudaKernels = CudaKernels {
        table: &crate::cuda::BITSPIKE_TABLE,
        pack: ["bitspike_pack_f32", "bitspike_pack_f16", "bitspike_pack_bf16"],
        unpack: [
            "bitspike_unpack_f32",
            "bitspike_unpack_f16",
            "bitspike_unpack_bf16",
        ],
    };
    fn payload_len(n: usize) -> usize {
        n.div_ceil(8)
    }
    fn pack<E: SpikeElem>(src: &[E], dst: &mut [u8], check: bool) -> Result<()> {
        cpu::pack_bits(src, dst, check)
    }
    fn unpack<E: SpikeElem>(src: &[u8], dst: &mut [E]) -> Result<()> {
        cpu::unpack_bits(src, dst)
    }
}

impl Compressor for BitSpike {
    fn kind(&self) -> CompressorKind {
        CompressorKind::BitSpike
    }

    /// `ceil(elements / 8)` bytes, whatever the dtype.
    fn packed_size(&self, shape: &Shape, _dtype: DType) -> PackedSize {
        PackedSize::Exact(elems(shape).div_ceil(8))
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        binary::compress::<BitSpike>(x)
    }

    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        binary::decompress::<BitSpike>(packed)
    }
}
