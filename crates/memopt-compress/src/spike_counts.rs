//! Spike counts: pooled spikes as one count per byte.

use crate::compressor::{elems, expect_kind};
use crate::{CompressError, Compressor, CompressorKind, Packed, PackedSize, Result};
use memopt_core::backend::{Compute, Init, compute};
use memopt_core::{DType, KernelBuffer, KnownValues, MemoryKind, Shape, Tensor};

/// Pooled spikes (a tensor known to be [`KnownValues::PooledSpikes`]: every value the mean of
/// `window` spikes, as an average pooling of spikes without padding makes) as one byte per
/// value, the count of spikes it averages: 4x smaller than f32, and exact (decompression
/// computes each mean as the pooling did, so every bit comes back). f32 only; CPU, Meta and
/// CUDA. A tensor not known to be pooled spikes is refused (its values are not checked, as
/// spikes are not under the spike flag: the flag comes from the op that made them).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpikeCounts;

const PACK_OP: &str = "spike_counts compress";
const UNPACK_OP: &str = "spike_counts decompress";

/// The window of a tensor known to be pooled spikes, or the error naming what is known.
fn window_of(values: KnownValues) -> Result<u16> {
    match values {
        KnownValues::PooledSpikes { window } => Ok(window),
        other => Err(CompressError::NotPooledSpikes {
            known: match other {
                KnownValues::Spikes => "it is spikes".into(),
                _ => "nothing is known about its values".into(),
            },
        }),
    }
}

impl Compressor for SpikeCounts {
    fn kind(&self) -> CompressorKind {
        CompressorKind::SpikeCounts
    }

    /// One byte per element.
    fn packed_size(&self, shape: &Shape, _dtype: DType) -> PackedSize {
        PackedSize::Exact(elems(shape))
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        if x.dtype() != DType::F32 {
            return Err(CompressError::WrongDType {
                compressor: "spike_counts",
                got: x.dtype(),
                accepted: "f32",
            });
        }
        let window = window_of(x.known_values())?;
        let n = x.elem_count();
        let xr = x.read::<f32>(PACK_OP)?;
        let mut out = KernelBuffer::<u8>::new(PACK_OP, x.device(), n, MemoryKind::Packed, Init::Overwritten)?;
        compute(x.device(), |backend| match backend {
            Compute::Cpu => crate::cpu::pack_counts(xr.host()?, out.host_mut()?, window),
            Compute::Cuda(gpu) => {
                crate::cuda::counts(gpu, "counts_pack_f32", xr.cuda_ptr()?, n, window, out.cuda_ptr()?)
            }
        })?;
        drop(xr);
        Ok(Packed::new(CompressorKind::SpikeCounts, out.into_tensor([n])?, x))
    }

    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        expect_kind(packed, CompressorKind::SpikeCounts)?;
        let window = window_of(packed.known_values())?;
        let n = packed.shape().elem_count();
        let src = packed.payload().read::<u8>(UNPACK_OP)?;
        let mut out = KernelBuffer::<f32>::new(
            UNPACK_OP,
            packed.device(),
            n,
            MemoryKind::Activation,
            Init::Overwritten,
        )?;
        compute(packed.device(), |backend| match backend {
            Compute::Cpu => crate::cpu::unpack_counts(src.host()?, out.host_mut()?, window),
            Compute::Cuda(gpu) => crate::cuda::counts(
                gpu,
                "counts_unpack_f32",
                src.cuda_ptr()?,
                n,
                window,
                out.cuda_ptr()?,
            ),
        })?;
        Ok(out
            .into_tensor(packed.shape().clone())?
            .with_known_values(packed.known_values()))
    }
}
