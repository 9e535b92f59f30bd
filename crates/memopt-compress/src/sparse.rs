//! Sparse: the indices of the ones.

use crate::binary::cpu_half;
use crate::compressor::{elems, expect_float, expect_kind};
use crate::cpu::{self, IndexBuf, SpikeElem};
use crate::{CompressError, Compressor, CompressorKind, Packed, PackedSize, Result};
use half::{bf16, f16};
use memopt_core::{DType, Device, Init, KernelBuffer, MemoryKind, Shape, Tensor};

/// The sorted row-major indices of the ones: u16 (stored as little-endian byte pairs in a u8
/// payload) when the tensor has at most 65,536 elements, else u32 (a u32 payload; at most 2^32
/// elements). Binary f32/f16/bf16 input; CPU and Meta.
///
/// Its size depends on the data: [`Compressor::packed_size`] says
/// [`PackedSize::DataDependent`] with the all-ones worst case, which is what the Meta device
/// allocates; on the CPU it pays when fewer than 1/16 (u16) or 1/32 (u32) of the values are ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct SparseCompressor;

const COMPRESS: &str = "sparse compress";
const DECOMPRESS: &str = "sparse decompress";

/// Bytes per index for a tensor of `n` elements.
pub fn sparse_index_bytes(n: u64) -> u64 {
    if n <= 1 << 16 { 2 } else { 4 }
}

fn unsupported_device(device: Device) -> CompressError {
    CompressError::UnsupportedDevice {
        compressor: "sparse",
        device,
        reason: "the sparse compressor runs on the cpu and meta devices only; use bit_spike on \
                 the GPU, or move the tensor to the cpu first"
            .into(),
    }
}

impl Compressor for SparseCompressor {
    fn kind(&self) -> CompressorKind {
        CompressorKind::Sparse
    }

    /// Data-dependent: 2 or 4 bytes per one; the worst case is every value a one.
    fn packed_size(&self, shape: &Shape, _dtype: DType) -> PackedSize {
        let n = elems(shape);
        PackedSize::DataDependent {
            worst_case: n * sparse_index_bytes(n),
        }
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        expect_float("sparse", x.dtype())?;
        if x.device().is_cuda() {
            return Err(unsupported_device(x.device()));
        }
        if x.elem_count() as u64 > 1 << 32 {
            return Err(CompressError::TooLarge {
                compressor: "sparse",
                message: format!(
                    "{} elements do not fit u32 indices (at most 2^32); use bit_spike",
                    x.elem_count()
                ),
            });
        }
        let payload = match x.dtype() {
            DType::F32 => compress_as::<f32>(x)?,
            DType::F16 => compress_as::<f16>(x)?,
            _ => compress_as::<bf16>(x)?,
        };
        Ok(Packed::new(CompressorKind::Sparse, payload, x))
    }

    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        expect_kind(packed, CompressorKind::Sparse)?;
        if packed.device().is_cuda() {
            return Err(unsupported_device(packed.device()));
        }
        let out = match packed.dtype() {
            DType::F32 => decompress_as::<f32>(packed)?,
            DType::F16 => decompress_as::<f16>(packed)?,
            _ => decompress_as::<bf16>(packed)?,
        };
        Ok(out.with_known_values(packed.known_values()))
    }
}

/// Counts per chunk (workspace), then allocates the payload: exact on the CPU, the worst case
/// (every value a one) on Meta.
fn compress_as<E: SpikeElem>(x: &Tensor) -> Result<Tensor> {
    let n = x.elem_count();
    let dev = x.device();
    let xr = x.read::<E>(COMPRESS)?;
    let mut counts = KernelBuffer::<i64>::workspace(COMPRESS, dev, cpu::chunk_count(n), Init::Overwritten)?;
    // The worst case (every value a one) where nothing is counted (Meta).
    let mut ones = n;
    cpu_half(COMPRESS, dev, || {
        ones = cpu::count_ones(xr.host()?, !x.is_spike(), counts.host_mut()?)?;
        Ok(())
    })?;
    let payload = if sparse_index_bytes(n as u64) == 2 {
        let mut out =
            KernelBuffer::<u8>::new(COMPRESS, dev, 2 * ones, MemoryKind::Packed, Init::Overwritten)?;
        cpu_half(COMPRESS, dev, || {
            cpu::fill_indices(xr.host()?, counts.host_mut()?, IndexBuf::U16Le(out.host_mut()?))
        })?;
        out.into_tensor([2 * ones])?
    } else {
        let mut out = KernelBuffer::<u32>::new(COMPRESS, dev, ones, MemoryKind::Packed, Init::Overwritten)?;
        cpu_half(COMPRESS, dev, || {
            cpu::fill_indices(xr.host()?, counts.host_mut()?, IndexBuf::U32(out.host_mut()?))
        })?;
        out.into_tensor([ones])?
    };
    drop(counts);
    Ok(payload)
}

fn decompress_as<E: SpikeElem>(packed: &Packed) -> Result<Tensor> {
    let n = packed.shape().elem_count();
    // The ones are scattered into zeros.
    let mut out = KernelBuffer::<E>::new(
        DECOMPRESS,
        packed.device(),
        n,
        MemoryKind::Activation,
        Init::Zeroed,
    )?;
    let payload = packed.payload();
    if sparse_index_bytes(n as u64) == 2 {
        let r = payload.read::<u8>(DECOMPRESS)?;
        cpu_half(DECOMPRESS, packed.device(), || {
            let b = r.host()?;
            let get = |k: usize| u16::from_le_bytes([b[2 * k], b[2 * k + 1]]) as usize;
            cpu::scatter_ones(b.len() / 2, get, out.host_mut()?);
            Ok(())
        })?;
    } else {
        let r = payload.read::<u32>(DECOMPRESS)?;
        cpu_half(DECOMPRESS, packed.device(), || {
            let v = r.host()?;
            cpu::scatter_ones(v.len(), |k| v[k] as usize, out.host_mut()?);
            Ok(())
        })?;
    }
    Ok(out.into_tensor(packed.shape().clone())?)
}
