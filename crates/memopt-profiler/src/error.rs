//! The error type of memopt-profiler.

use memopt_checkpoint::CheckpointError;
use memopt_core::CoreError;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, ProfilerError>;

/// Everything that can go wrong while profiling or estimating a step.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProfilerError {
    /// Building the model, applying the plan or running the step failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A tensor operation failed (creating the batch).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A compressor failed (timing its packing and unpacking).
    #[error(transparent)]
    Compress(#[from] memopt_compress::CompressError),
    /// The request itself is invalid (zero runs, a batch of zero samples, ...).
    #[error("invalid profiler request: {0}")]
    Invalid(String),
    /// A calibration file is malformed or does not apply here (another device or host).
    #[error("calibration: {0}")]
    Calibration(String),
    /// A step did not give back all its memory, so a reused session would drift. Reports the
    /// bytes held before and after the step.
    #[error(
        "the step leaked memory: {before} bytes were held before it and {after} after it; \
         the estimator's session can no longer be reused"
    )]
    Leak {
        /// Bytes held before the step.
        before: u64,
        /// Bytes held after it.
        after: u64,
    },
}

impl ProfilerError {
    /// Whether a device ran out of memory (see [`CoreError::is_out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            ProfilerError::Core(e) => e.is_out_of_memory(),
            ProfilerError::Checkpoint(e) => e.is_out_of_memory(),
            ProfilerError::Compress(memopt_compress::CompressError::Core(e)) => e.is_out_of_memory(),
            _ => false,
        }
    }
}
