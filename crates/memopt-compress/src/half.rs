//! Half: a lossy f16 or bf16 copy (opt-in only).

use crate::binary::cpu_half;
use crate::compressor::{elems, expect_float, expect_kind};
use crate::{CompressError, Compressor, CompressorKind, Packed, PackedSize, Result};
use half::{bf16, f16};
use memopt_core::{DType, Element, Init, KernelBuffer, MemoryKind, Shape, Tensor};
use rayon::prelude::*;

/// A copy rounded to f16 or bf16 (round to nearest even), converted back on decompression.
/// Lossy (except for values the half type holds exactly, such as spikes), so it is opt-in only
/// and never chosen automatically. f32/f16/bf16 input; CPU and Meta.
#[derive(Debug, Clone, Copy)]
pub struct Half {
    dtype: DType,
}

impl Half {
    /// Rounds to f16.
    pub const F16: Half = Half { dtype: DType::F16 };
    /// Rounds to bf16.
    pub const BF16: Half = Half { dtype: DType::BF16 };

    /// The half compressor storing `dtype` (F16 or BF16; any other dtype gives F16).
    pub(crate) fn new(dtype: DType) -> Half {
        match dtype {
            DType::BF16 => Half::BF16,
            _ => Half::F16,
        }
    }

    /// The dtype of the payload (f16 or bf16).
    pub fn storage_dtype(&self) -> DType {
        self.dtype
    }

    fn name(&self) -> &'static str {
        self.kind().name()
    }
}

impl Compressor for Half {
    fn kind(&self) -> CompressorKind {
        match self.dtype {
            DType::BF16 => CompressorKind::BF16,
            _ => CompressorKind::F16,
        }
    }

    /// Two bytes per element.
    fn packed_size(&self, shape: &Shape, _dtype: DType) -> PackedSize {
        PackedSize::Exact(elems(shape) * 2)
    }

    fn compress(&self, x: &Tensor) -> Result<Packed> {
        let op = match self.dtype {
            DType::BF16 => "bf16 compress",
            _ => "f16 compress",
        };
        expect_float(self.name(), x.dtype())?;
        if x.device().is_cuda() {
            return Err(self.unsupported(x));
        }
        let payload = match self.dtype {
            DType::BF16 => convert_to::<bf16>(op, x, MemoryKind::Packed)?,
            _ => convert_to::<f16>(op, x, MemoryKind::Packed)?,
        };
        Ok(Packed::new(self.kind(), payload, x))
    }

    fn decompress(&self, packed: &Packed) -> Result<Tensor> {
        const OP: &str = "half decompress";
        expect_kind(packed, self.kind())?;
        if packed.device().is_cuda() {
            return Err(self.unsupported(packed.payload()));
        }
        let out = match packed.dtype() {
            DType::F32 => convert_to::<f32>(OP, packed.payload(), MemoryKind::Activation)?,
            DType::F16 => convert_to::<f16>(OP, packed.payload(), MemoryKind::Activation)?,
            _ => convert_to::<bf16>(OP, packed.payload(), MemoryKind::Activation)?,
        };
        Ok(out.with_spike_flag(packed.is_spike()))
    }
}

impl Half {
    fn unsupported(&self, x: &Tensor) -> CompressError {
        CompressError::UnsupportedDevice {
            compressor: self.name(),
            device: x.device(),
            reason: "half compressors run on the cpu and meta devices only; use bit_spike for \
                     spikes on the GPU, or move the tensor to the cpu first"
                .into(),
        }
    }
}

/// A float type converted through f32 (exact for f16 and bf16).
trait Float: Element {
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Float for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Float for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Float for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// A new tensor of `x`'s shape holding `x` converted to `D` (round to nearest even).
fn convert_to<D: Float>(op: &'static str, x: &Tensor, kind: MemoryKind) -> Result<Tensor> {
    let out = KernelBuffer::<D>::new(op, x.device(), x.elem_count(), kind, Init::Overwritten)?;
    let out = match x.dtype() {
        DType::F32 => convert_from::<f32, D>(op, x, out)?,
        DType::F16 => convert_from::<f16, D>(op, x, out)?,
        _ => convert_from::<bf16, D>(op, x, out)?,
    };
    Ok(out.into_tensor(x.shape().clone())?)
}

fn convert_from<S: Float, D: Float>(
    op: &'static str,
    x: &Tensor,
    mut out: KernelBuffer<D>,
) -> Result<KernelBuffer<D>> {
    const CHUNK: usize = 1 << 14;
    let xr = x.read::<S>(op)?;
    cpu_half(op, x.device(), || {
        let (s, d) = (xr.host()?, out.host_mut()?);
        d.par_chunks_mut(CHUNK)
            .zip(s.par_chunks(CHUNK))
            .for_each(|(d, s)| {
                d.iter_mut()
                    .zip(s)
                    .for_each(|(d, &s)| *d = D::from_f32(s.to_f32()))
            });
        Ok(())
    })?;
    drop(xr);
    Ok(out)
}
