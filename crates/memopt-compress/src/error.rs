//! The error type of memopt-compress.

use crate::CompressorKind;
use memopt_core::{CoreError, DType, Device};

/// Result alias of memopt-compress.
pub type Result<T> = std::result::Result<T, CompressError>;

/// Everything that can go wrong while compressing or decompressing. Each message names the
/// compressor, the problem and what would be valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompressError {
    /// An error from memopt-core (allocation on a missing GPU, a CUDA failure, ...).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A binary compressor was given a value other than 0 or 1 in a tensor without the spike
    /// flag.
    #[error(
        "{compressor}: input is not binary: element {index} (row-major) is {value}; binary \
         compressors accept only 0 and 1 (use the null or a half compressor for other data, \
         and set the spike flag only on tensors known to hold 0 and 1)"
    )]
    NonBinary {
        /// The compressor that checked.
        compressor: &'static str,
        /// Row-major position of the first offending element.
        index: u64,
        /// Its value.
        value: f64,
    },
    /// The spike-count compressor was given a tensor not known to be pooled spikes.
    #[error(
        "spike_counts: the input is not known to be pooled spikes ({known}); spike_counts keeps \
         averages of spikes (an average pooling of f32 spikes without padding, at most 255 per \
         window) as one count per byte; use bit_spike or u8 for spikes, null for other data"
    )]
    NotPooledSpikes {
        /// What is known about the input's values, in words.
        known: String,
    },
    /// The input's dtype is not one the compressor accepts.
    #[error("{compressor}: unsupported dtype {got}; accepted dtypes: {accepted}")]
    WrongDType {
        /// The compressor.
        compressor: &'static str,
        /// The dtype it was given.
        got: DType,
        /// What it accepts, in words.
        accepted: &'static str,
    },
    /// The compressor cannot run on this device.
    #[error("{compressor}: not available on {device}: {reason}")]
    UnsupportedDevice {
        /// The compressor.
        compressor: &'static str,
        /// The device of the input.
        device: Device,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A [`crate::Packed`] was handed to a compressor of another kind.
    #[error(
        "packed data made by the {packed} compressor cannot be decompressed by the {compressor} \
         compressor; use {packed}.build() or Packed::decompress"
    )]
    Mismatch {
        /// Kind that made the packed data.
        packed: CompressorKind,
        /// Kind asked to decompress it.
        compressor: CompressorKind,
    },
    /// The input is too large for the compressor's format.
    #[error("{compressor}: {message}")]
    TooLarge {
        /// The compressor.
        compressor: &'static str,
        /// What limit was exceeded and what to use instead.
        message: String,
    },
}

impl CompressError {
    /// Whether a device ran out of memory (see [`CoreError::is_out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CompressError::Core(e) if e.is_out_of_memory())
    }
}
