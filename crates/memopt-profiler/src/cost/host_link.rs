//! The host link: how the cost model prices an offload's copies to host memory and back.

use super::model::{CodecSpeed, CostModel, Throughput};

/// How many times a GPU's memory bandwidth exceeds its copies to and from host memory, for the
/// uncalibrated cost model of a GPU target: an H100's 3.35 TB/s HBM against about 16 GB/s of
/// copies through pageable host memory over PCIe 5. A guess, as the uncalibrated model's
/// throughputs are (the compute and memory guesses are a CPU's, so only their ratio to this
/// one means anything); `memopt calibrate --device cuda` measures the link.
pub const GPU_MEMORY_OVER_HOST_LINK: f64 = 200.0;

impl CostModel {
    /// The uncalibrated guess of a GPU's host link: [`GPU_MEMORY_OVER_HOST_LINK`] times slower
    /// than the memory bandwidth guess, as a GPU's copies to and from host memory are slower
    /// than its own memory; a calibration on the GPU measures it.
    pub fn guessed_gpu_host_link(throughput: Throughput) -> CodecSpeed {
        let per_s = throughput.bytes_per_s / GPU_MEMORY_OVER_HOST_LINK;
        CodecSpeed {
            compress_bytes_per_s: per_s,
            decompress_bytes_per_s: per_s,
        }
    }

    /// Time to copy an offloaded payload of `payload` bytes to host memory once and back
    /// `restores` times, in milliseconds, at the measured [`CostModel::host_link`] speeds (at
    /// `throughput.bytes_per_s` when not measured).
    pub fn host_copies_ms(&self, payload: u64, restores: f64) -> f64 {
        let (out, back) = match self.host_link {
            Some(l) => (l.compress_bytes_per_s, l.decompress_bytes_per_s),
            None => (self.throughput.bytes_per_s, self.throughput.bytes_per_s),
        };
        1e3 * payload as f64 * (1.0 / out + restores / back)
    }
}
