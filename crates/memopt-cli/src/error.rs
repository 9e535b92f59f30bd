//! The error type of the `memopt` command: every failure is one line of text and an exit code.

use memopt_checkpoint::CheckpointError;
use memopt_core::CoreError;
use memopt_profiler::ProfilerError;
use memopt_search::SearchError;
use std::path::{Path, PathBuf};

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CliError>;

/// Everything that can go wrong in a command. [`CliError::exit_code`] gives the process status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Building a model, applying a plan or running a step failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The profiler failed.
    #[error(transparent)]
    Profiler(#[from] ProfilerError),
    /// A planner failed (an infeasible budget among others).
    #[error(transparent)]
    Search(#[from] SearchError),
    /// A tensor operation failed (CUDA unavailable among others).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Reading a dataset or weights failed.
    #[error(transparent)]
    Data(#[from] memopt_data::DataError),
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Writing the report to standard output failed (a closed pipe among others).
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// Options that do not go together (exit status 2, like clap's own usage errors).
    #[error("{0}")]
    Usage(String),
    /// A request that cannot be served (an unknown device, an infeasible budget, ...).
    #[error("{0}")]
    Invalid(String),
    /// `--verify` found a difference between the plan and the baseline.
    #[error("verification failed: {0}")]
    Verification(String),
}

impl CliError {
    /// Whether a device ran out of memory (a GPU's CUDA out-of-memory among others).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            CliError::Checkpoint(e) => e.is_out_of_memory(),
            CliError::Profiler(e) => e.is_out_of_memory(),
            CliError::Search(e) => e.is_out_of_memory(),
            CliError::Core(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// Process exit status: 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    /// A read error for `path`.
    pub fn read(path: &Path, source: std::io::Error) -> CliError {
        CliError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }
    }

    /// A write error for `path`.
    pub fn write(path: &Path, source: std::io::Error) -> CliError {
        CliError::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes formatted text to a command's output, mapping I/O errors to [`CliError::Output`].
#[macro_export]
macro_rules! out {
    ($w:expr, $($arg:tt)*) => {
        writeln!($w, $($arg)*).map_err($crate::error::CliError::Output)
    };
}
