//! Bit-packed f32 spike tensors that layers read one time step at a time.

use crate::cpu;
use crate::{BitSpike, CompressError, Compressor, CompressorKind, Packed, Result};
use memopt_core::backend::{Compute, Init, compute};
use memopt_core::kernels::StepInput;
use memopt_core::{CoreError, DType, Device, KernelBuffer, MemoryKind, Shape, Tensor};
use rayon::prelude::*;

/// Op name of unpacking, in tracker-facing errors.
const UNPACK_OP: &str = "bit_spike unpack";

/// An f32 tensor of spikes (0 and 1) held bit-packed: its row-major values are bits
/// `first .. first + elements` of a [`BitSpike`] payload (value `i` in bit `i % 8` of byte
/// `i / 8`), tracked with kind [`MemoryKind::Packed`]. Reshaping and time slicing are views of
/// the same payload. Layers read it one time step at a time ([`StepInput`]:
/// `memopt_core::kernels::conv2d_stepwise`, `linear_stepwise` and their backwards), so the whole
/// f32 tensor never exists; [`PackedSpikes::unpack`] recreates it for other ops. Clones share
/// the payload.
#[derive(Debug, Clone)]
pub struct PackedSpikes {
    payload: Tensor,
    first: usize,
    shape: Shape,
}

impl PackedSpikes {
    /// Packs the f32 tensor `x` (values checked to be 0 or 1 unless it carries the spike flag)
    /// into a new payload of `ceil(elements / 8)` bytes.
    pub fn pack(x: &Tensor) -> Result<PackedSpikes> {
        if x.dtype() != DType::F32 {
            return Err(CompressError::WrongDType {
                compressor: CompressorKind::BitSpike.name(),
                got: x.dtype(),
                accepted: "f32 (packed spikes are read by f32 layers)",
            });
        }
        let packed = BitSpike.compress(x)?;
        Ok(PackedSpikes {
            payload: packed.payload().clone(),
            first: 0,
            shape: x.shape().clone(),
        })
    }

    /// The spikes of `packed` when it is a [`BitSpike`] payload of an f32 tensor (sharing the
    /// payload); `None` for any other compressor or dtype.
    pub fn from_packed(packed: &Packed) -> Option<PackedSpikes> {
        (packed.kind() == CompressorKind::BitSpike && packed.dtype() == DType::F32).then(|| PackedSpikes {
            payload: packed.payload().clone(),
            first: 0,
            shape: packed.shape().clone(),
        })
    }

    /// Shape of the f32 tensor.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Dimensions of the f32 tensor.
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    /// Device of the payload.
    pub fn device(&self) -> Device {
        self.payload.device()
    }

    /// The payload (1-D bytes; shared by every view of it).
    pub fn payload(&self) -> &Tensor {
        &self.payload
    }

    /// Bytes the f32 tensor would take (4 per value).
    pub fn unpacked_bytes(&self) -> u64 {
        self.shape.elem_count() as u64 * DType::F32.size_in_bytes() as u64
    }

    /// The same values with another shape of the same element count.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<PackedSpikes> {
        Ok(PackedSpikes {
            shape: crate::compressor::reshaped("packed spikes reshape", &self.shape, shape.into())?,
            ..self.clone()
        })
    }

    /// Entries `start .. start + len` of dimension 0 (a time slice of `[T, ...]`), sharing the
    /// payload.
    pub fn narrow0(&self, start: usize, len: usize) -> Result<PackedSpikes> {
        const OP: &str = "packed spikes narrow0";
        let Some(&d0) = self.shape.dims().first() else {
            return Err(CoreError::invalid(OP, "cannot slice a scalar").into());
        };
        if start.checked_add(len).is_none_or(|end| end > d0) {
            return Err(CoreError::invalid(
                OP,
                format!(
                    "range {start}..{} is outside dimension 0 of size {d0}",
                    start.saturating_add(len)
                ),
            )
            .into());
        }
        Ok(PackedSpikes {
            payload: self.payload.clone(),
            // Within the payload's bits: start * inner <= elements.
            first: self.first + start * self.shape.inner_count(),
            shape: self.shape.with_dim0(len),
        })
    }

    /// The f32 tensor, recreated in a new buffer (kind [`MemoryKind::Activation`], spike flag
    /// set): 1.0 for a set bit, +0.0 otherwise.
    pub fn unpack(&self) -> Result<Tensor> {
        let n = self.shape.elem_count();
        let mut out = KernelBuffer::<f32>::new(
            UNPACK_OP,
            self.device(),
            n,
            MemoryKind::Activation,
            Init::Overwritten,
        )?;
        self.write_span(UNPACK_OP, 0, &mut out)?;
        Ok(out.into_tensor(self.shape.clone())?.with_spike_flag(true))
    }

    /// The same spikes with the payload's bytes that hold them copied to `device` and recorded
    /// there as `kind` (the offload policy moves payloads to host memory and back): a time
    /// slice of a larger payload moves its own bytes, not the whole payload's.
    pub fn to_device(&self, device: Device, kind: MemoryKind) -> Result<PackedSpikes> {
        // Within the payload: first + elements <= 8 * payload bytes.
        let end_bit = self.first + self.shape.elem_count();
        let (start, end) = (self.first / 8, end_bit.div_ceil(8));
        let bytes = self.payload.narrow0(start, end - start)?;
        Ok(PackedSpikes {
            payload: bytes.to_device_as(device, kind)?,
            first: self.first % 8,
            shape: self.shape.clone(),
        })
    }
}

impl StepInput for PackedSpikes {
    fn shape(&self) -> &Shape {
        &self.shape
    }

    fn device(&self) -> Device {
        self.payload.device()
    }

    /// Unpacks values `first .. first + dst.len()`: on the CPU with the byte table of
    /// [`cpu::unpack_bits`] when the span starts on a byte, bit by bit otherwise; on a GPU with
    /// `bitspike_unpack_f32` (byte-aligned) or `bitspike_unpack_span_f32`.
    fn write_span(
        &self,
        op: &'static str,
        first: usize,
        dst: &mut KernelBuffer<f32>,
    ) -> memopt_core::Result<()> {
        let len = dst.len();
        let elements = self.shape.elem_count();
        if first.checked_add(len).is_none_or(|end| end > elements) {
            return Err(CoreError::invalid(
                op,
                format!(
                    "values {first}..{} of packed spikes with {elements} values",
                    first.saturating_add(len)
                ),
            ));
        }
        let bit0 = self.first + first;
        let src = self.payload.read::<u8>(op)?;
        compute(self.device(), |backend| match backend {
            Compute::Cpu => {
                let (src, dst) = (src.host()?, dst.host_mut()?);
                if bit0.is_multiple_of(8) {
                    let bytes = &src[bit0 / 8..bit0 / 8 + len.div_ceil(8)];
                    cpu::unpack_bits(bytes, dst).map_err(|e| core_error(op, e))
                } else {
                    unpack_from_bit(src, bit0, dst);
                    Ok(())
                }
            }
            Compute::Cuda(gpu) => {
                let (src, out) = (src.cuda_ptr()?, dst.cuda_ptr()?);
                let r = if bit0.is_multiple_of(8) {
                    let kernels = &<BitSpike as crate::binary::ByteCodec>::CUDA;
                    crate::cuda::unpack::<f32>(gpu, kernels, src.offset(bit0 / 8, 1), len, out)
                } else {
                    crate::cuda::unpack_span_f32(gpu, src, bit0, len, out)
                };
                r.map_err(|e| core_error(op, e))
            }
        })
    }
}

/// A compression error as the [`StepInput`] seam reports it (memopt-core's error type).
fn core_error(op: &'static str, e: CompressError) -> CoreError {
    match e {
        CompressError::Core(e) => e,
        other => CoreError::invalid(op, other.to_string()),
    }
}

/// Values `bit0 .. bit0 + dst.len()` of the bit stream `src`, one bit at a time (spans that do
/// not start on a byte): 1.0 for a set bit, +0.0 otherwise, as [`cpu::unpack_bits`].
fn unpack_from_bit(src: &[u8], bit0: usize, dst: &mut [f32]) {
    const BLOCK: usize = 1 << 16;
    let block = |(b, d): (usize, &mut [f32])| {
        for (i, v) in d.iter_mut().enumerate() {
            let j = bit0 + b * BLOCK + i;
            *v = if (src[j / 8] >> (j % 8)) & 1 == 1 {
                1.0
            } else {
                0.0
            };
        }
    };
    if dst.len() < 1 << 19 {
        dst.chunks_mut(BLOCK).enumerate().for_each(block);
    } else {
        dst.par_chunks_mut(BLOCK).enumerate().for_each(block);
    }
}
