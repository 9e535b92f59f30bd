//! How a forward pass ends before giving its outputs: an error, or a chunk of a statistics pass
//! that has gathered what the pass needs. A forward runs arbitrary module code, and the `?`
//! that carries an error out of it carries the statistics pass's end too; the type keeps the
//! two apart, so no caller mistakes one for the other and no public error stands for control
//! flow.

use crate::CheckpointError;
use memopt_compress::CompressError;
use memopt_core::CoreError;

/// What [`crate::Module::forward`] and the calls of [`crate::Cx`] return.
pub type Forward<T> = std::result::Result<T, Stop>;

/// Why a forward pass stopped before giving its outputs.
#[derive(Debug, Clone)]
pub enum Stop {
    /// Something went wrong.
    Error(CheckpointError),
    /// A time chunk of a chunked segment's statistics pass reached the training BatchNorm
    /// whose statistics the pass gathers, which added the chunk's sums
    /// (`policy/chunk_passes.rs`). Only that pass sees it: nothing after the BatchNorm runs.
    StatisticsGathered,
}

impl From<CheckpointError> for Stop {
    fn from(e: CheckpointError) -> Self {
        Stop::Error(e)
    }
}

impl From<CoreError> for Stop {
    fn from(e: CoreError) -> Self {
        Stop::Error(e.into())
    }
}

impl From<CompressError> for Stop {
    fn from(e: CompressError) -> Self {
        Stop::Error(e.into())
    }
}

impl Stop {
    /// The stop as a caller of the library sees it: the error, or, for a statistics pass's end
    /// outside the pass that runs it, an error naming the bug. Deliberately not a `From`: a `?`
    /// must never turn a forward's stop into an error on the way back to that pass.
    pub fn into_error(self) -> CheckpointError {
        match self {
            Stop::Error(e) => e,
            Stop::StatisticsGathered => CheckpointError::Autograd(
                "a chunked segment's statistics pass ended outside the segment (a bug in memopt-checkpoint)"
                    .into(),
            ),
        }
    }
}
