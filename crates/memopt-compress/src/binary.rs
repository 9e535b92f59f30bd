//! The shared path of the byte-payload binary compressors (BitSpike, Bool/U8): validation,
//! tracked allocation in one order on every device, the status word of the binary check, and
//! dispatch to the CPU kernels or the CUDA kernels.

use crate::compressor::{expect_float, expect_kind};
use crate::cpu::SpikeElem;
use crate::cuda::CudaKernels;
use crate::{CompressError, CompressorKind, Packed, Result};
use half::{bf16, f16};
use memopt_core::backend::{Compute, Init, compute, launch_on};
use memopt_core::{DType, Device, KernelBuffer, MemoryKind, Tensor};

/// A binary compressor whose payload is a byte buffer of a length fixed by the element count.
pub(crate) trait ByteCodec {
    /// Its kind.
    const KIND: CompressorKind;
    /// Op names used in tracker-facing errors.
    const PACK_OP: &'static str;
    /// Op name of decompression.
    const UNPACK_OP: &'static str;
    /// CUDA kernels: the source and the pack and unpack kernel names for f32, f16, bf16.
    const CUDA: CudaKernels;
    /// Payload bytes for `n` values.
    fn payload_len(n: usize) -> usize;
    /// CPU pack (see [`crate::cpu::pack_bits`]).
    fn pack<E: SpikeElem>(src: &[E], dst: &mut [u8], check: bool) -> Result<()>;
    /// CPU unpack.
    fn unpack<E: SpikeElem>(src: &[u8], dst: &mut [E]) -> Result<()>;
}

/// The 8-byte status word of the binary check: -1, or the first offending index. It is the
/// GPU kernel's `atomicMin` target; the CPU records it too, so that every device allocates
/// exactly the same.
pub(crate) fn status_word(op: &'static str, device: Device) -> Result<KernelBuffer<i64>> {
    let mut w = KernelBuffer::<i64>::workspace(op, device, 1, Init::Overwritten)?;
    compute(device, |backend| match backend {
        Compute::Cpu => {
            w.host_mut()?[0] = -1;
            Ok(())
        }
        Compute::Cuda(gpu) => crate::cuda::reset_status(gpu, w.cuda_ptr()?),
    })?;
    Ok(w)
}

/// Runs the CPU half of compression op `op` (nothing on Meta); a GPU gets the op's
/// `Unsupported` answer (for compressors without CUDA kernels).
pub(crate) fn cpu_half(op: &'static str, device: Device, cpu: impl FnOnce() -> Result<()>) -> Result<()> {
    launch_on(device, cpu, |gpu| Err(gpu.unsupported(op).into()))
}

/// Compresses `x` with codec `C`: validates, allocates the payload and (when the values are
/// checked) the status word in that order on every device, then packs on the CPU or GPU.
pub(crate) fn compress<C: ByteCodec>(x: &Tensor) -> Result<Packed> {
    let name = C::KIND.name();
    expect_float(name, x.dtype())?;
    let check = !x.is_spike();
    let len = C::payload_len(x.elem_count());
    let mut out =
        KernelBuffer::<u8>::new(C::PACK_OP, x.device(), len, MemoryKind::Packed, Init::Overwritten)?;
    let mut status = match check {
        true => Some(status_word(C::PACK_OP, x.device())?),
        false => None,
    };
    let r = match x.dtype() {
        DType::F32 => pack_on::<C, f32>(x, &mut out, status.as_mut()),
        DType::F16 => pack_on::<C, f16>(x, &mut out, status.as_mut()),
        _ => pack_on::<C, bf16>(x, &mut out, status.as_mut()),
    };
    drop(status);
    r?;
    Ok(Packed::new(C::KIND, out.into_tensor([len])?, x))
}

/// Packs `x` into `out`, checking its values when `status` is given; the first offending index
/// ends up in the status word on every device.
fn pack_on<C: ByteCodec, E: SpikeElem>(
    x: &Tensor,
    out: &mut KernelBuffer<u8>,
    mut status: Option<&mut KernelBuffer<i64>>,
) -> Result<()> {
    let xr = x.read::<E>(C::PACK_OP)?;
    let check = status.is_some();
    compute(x.device(), |backend| match backend {
        Compute::Cpu => {
            let r = C::pack(xr.host()?, out.host_mut()?, check);
            if let (Err(CompressError::NonBinary { index, .. }), Some(w)) = (&r, status.as_mut()) {
                w.host_mut()?[0] = *index as i64;
            }
            r
        }
        Compute::Cuda(gpu) => {
            let launch = crate::cuda::PackLaunch {
                x: xr.cuda_ptr()?,
                n: x.elem_count(),
                out: out.cuda_ptr()?,
                status: status.map(|w| w.cuda_ptr()).transpose()?,
                compressor: C::KIND.name(),
            };
            crate::cuda::pack::<E>(gpu, &C::CUDA, launch)
        }
    })
}

/// Decompresses a payload made by codec `C`.
pub(crate) fn decompress<C: ByteCodec>(packed: &Packed) -> Result<Tensor> {
    expect_kind(packed, C::KIND)?;
    let out = match packed.dtype() {
        DType::F32 => unpack_on::<C, f32>(packed)?,
        DType::F16 => unpack_on::<C, f16>(packed)?,
        _ => unpack_on::<C, bf16>(packed)?,
    };
    Ok(out.with_known_values(packed.known_values()))
}

fn unpack_on<C: ByteCodec, E: SpikeElem>(packed: &Packed) -> Result<Tensor> {
    let src = packed.payload().read::<u8>(C::UNPACK_OP)?;
    let n = packed.shape().elem_count();
    let mut out = KernelBuffer::<E>::new(
        C::UNPACK_OP,
        packed.device(),
        n,
        MemoryKind::Activation,
        Init::Overwritten,
    )?;
    compute(packed.device(), |backend| match backend {
        Compute::Cpu => C::unpack(src.host()?, out.host_mut()?),
        Compute::Cuda(gpu) => crate::cuda::unpack::<E>(gpu, &C::CUDA, src.cuda_ptr()?, n, out.cuda_ptr()?),
    })?;
    Ok(out.into_tensor(packed.shape().clone())?)
}
