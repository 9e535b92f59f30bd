//! Timing a compressor: how long packing and unpacking a saved input takes on a device, measured
//! directly rather than guessed from bytes moved.

use super::TimingProfiler;
use super::recorder::Clock;
use super::report::median;
use crate::Result;
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryKind, MemoryTracker, Shape, Tensor};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// How long one compressor took to pack and unpack one spike tensor (median over runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodecTiming {
    /// The compressor timed.
    pub compressor: CompressorKind,
    /// Dimensions of the tensor packed.
    pub shape: Vec<usize>,
    /// Size of the tensor before packing, in bytes (f32 values).
    pub input_bytes: u64,
    /// Median time to pack it, in milliseconds.
    pub compress_ms: f64,
    /// Median time to unpack it, in milliseconds.
    pub decompress_ms: f64,
}

/// Spikes (0 or 1) at a rate of about one in five, the same on every call (packing time does not
/// depend on the values for the compressors timed here; the values only have to be binary).
fn spikes(shape: &Shape, device: Device) -> Result<Tensor> {
    let n = shape.elem_count_for("codec timing")?;
    let mut values = memopt_core::host_vec_with_capacity::<f32>(n)?;
    values.extend((0..n as u64).map(|i| {
        if i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61 == 0 {
            1.0
        } else {
            0.0
        }
    }));
    Ok(Tensor::from_vec(values, shape.clone(), device, MemoryKind::Activation)?.with_spike_flag(true))
}

impl TimingProfiler {
    /// Times `compressor` packing and unpacking a spike tensor of `shape` on `device`: `warmup`
    /// discarded rounds, then the median of `runs` (CUDA events on a GPU, host time elsewhere).
    /// The tensors live in a tracker of their own, so nothing of this shows in the caller's
    /// memory figures.
    pub fn profile_codec(
        &self,
        compressor: CompressorKind,
        shape: &[usize],
        device: Device,
    ) -> Result<CodecTiming> {
        let codec = compressor.build();
        self.round_trips(
            shape,
            device,
            compressor,
            |x| codec.compress(x).map_err(Into::into),
            |packed| Ok(codec.decompress(packed)?),
        )
    }

    /// Times moving an f32 tensor of `shape` from `device` to its host memory
    /// ([`Device::host`]) and back, as an offload moves a saved payload kept whole, after
    /// `warmup` rounds: the median of `runs` rounds of each direction (CUDA events on a GPU).
    /// On the CPU, whose host is itself, it times a copy. Reported as a [`CodecTiming`] of the
    /// `null` compressor: `compress_ms` to the host, `decompress_ms` back. Both copies live in
    /// trackers of their own.
    pub fn profile_host_link(&self, shape: &[usize], device: Device) -> Result<CodecTiming> {
        let host = device.host();
        let _host = (host != device).then(|| MemoryTracker::install(MemoryTracker::new(host)));
        self.round_trips(
            shape,
            device,
            CompressorKind::Null,
            |x| Ok(x.to_device_as(host, MemoryKind::Offloaded)?),
            |on_host| Ok(on_host.to_device_as(device, MemoryKind::Activation)?),
        )
    }

    /// `warmup` discarded rounds, then `runs` timed rounds of `there` on a spike tensor of
    /// `shape` on `device` followed by `back` on its result, in a tracker of their own: the
    /// medians as a [`CodecTiming`] of `compressor` (`compress_ms`: there, `decompress_ms`:
    /// back).
    fn round_trips<A, B>(
        &self,
        shape: &[usize],
        device: Device,
        compressor: CompressorKind,
        there: impl Fn(&Tensor) -> Result<A>,
        back: impl Fn(&A) -> Result<B>,
    ) -> Result<CodecTiming> {
        if self.runs == 0 {
            return Err(crate::ProfilerError::Invalid(
                "the timing profiler needs at least one run".into(),
            ));
        }
        let _own = MemoryTracker::install(MemoryTracker::new(device));
        let shape = Shape::from(shape.to_vec());
        let x = spikes(&shape, device)?;
        let (mut theres, mut backs) = (Vec::with_capacity(self.runs), Vec::with_capacity(self.runs));
        for round in 0..self.warmup + self.runs {
            let mut clock = Clock::for_device(device)?;
            let start = clock.mark(Instant::now())?;
            let moved = there(&x)?;
            let there_at = clock.mark(Instant::now())?;
            let returned = back(&moved)?;
            let end = clock.mark(Instant::now())?;
            let at = clock.resolve()?;
            drop((moved, returned));
            if round >= self.warmup {
                theres.push(at[there_at].saturating_sub(at[start]).as_secs_f64() * 1e3);
                backs.push(at[end].saturating_sub(at[there_at]).as_secs_f64() * 1e3);
            }
        }
        Ok(CodecTiming {
            compressor,
            shape: shape.dims().to_vec(),
            input_bytes: x.view_bytes(),
            compress_ms: median(&theres),
            decompress_ms: median(&backs),
        })
    }
}
