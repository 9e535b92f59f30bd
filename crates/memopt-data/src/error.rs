//! The crate's error type.

use memopt_core::input_file::{InputFileError, read_bounded};
use std::path::PathBuf;

/// Result with [`DataError`].
pub type Result<T> = std::result::Result<T, DataError>;

/// What went wrong reading, integrating or writing data and weights.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file's bytes are not what its format says, at a byte offset.
    #[error("{}: at byte {offset}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Offset of the first bad byte.
        offset: u64,
        /// What is wrong and what would be valid.
        message: String,
    },
    /// A file is well formed but unusable here (wrong arrays, shapes, names).
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong and what would be valid.
        message: String,
    },
    /// Something the data path would allocate exceeds its memory budget (see
    /// [`crate::MemoryBudget`]).
    #[error(
        "{what} would take {} ({need_bytes} bytes), more than the {} the data path may use \
         ({limit_from}); use fewer or smaller frames, a smaller batch, or raise the limit",
        memopt_core::units::bytes(*need_bytes),
        memopt_core::units::bytes(*limit_bytes)
    )]
    Memory {
        /// What would be allocated, with its shape.
        what: String,
        /// Predicted bytes.
        need_bytes: u64,
        /// The budget, in bytes.
        limit_bytes: u64,
        /// Where the budget comes from.
        limit_from: String,
    },
    /// An argument is out of range (frame count, ratio, batch size, ...).
    #[error("{0}")]
    Invalid(String),
    /// The model or optimizer refused something.
    #[error(transparent)]
    Checkpoint(#[from] memopt_checkpoint::CheckpointError),
    /// A tensor operation failed.
    #[error(transparent)]
    Core(#[from] memopt_core::CoreError),
}

impl DataError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }

    /// A format error in `path` at byte `offset`.
    pub fn format(path: impl Into<PathBuf>, offset: u64, message: impl Into<String>) -> Self {
        DataError::Format {
            path: path.into(),
            offset,
            message: message.into(),
        }
    }

    /// A file-level error in `path`.
    pub fn file(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        DataError::File {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Largest dataset, events or weights file read whole, in bytes (4 GiB: one recording of the
/// event datasets memopt reads is tens of MiB, the published VGG's weights under 100 MiB).
pub const MAX_DATA_FILE_BYTES: u64 = 4 << 30;

/// The error for an input file that is not a regular file of at most the limit.
pub(crate) fn input_error(path: &std::path::Path, e: InputFileError) -> DataError {
    match e {
        InputFileError::Io(io) => DataError::io(path, io),
        e => DataError::file(path, e.to_string()),
    }
}

/// Reads a whole file, naming it on error: a regular file of at most [`MAX_DATA_FILE_BYTES`]
/// bytes, read with that bound (a device such as `/dev/zero` or a directory is an error, not
/// an endless read).
pub(crate) fn read_all(path: &std::path::Path) -> Result<Vec<u8>> {
    read_bounded(path, MAX_DATA_FILE_BYTES).map_err(|e| input_error(path, e))
}

/// [`read_all`], refusing before reading a file larger than `budget`.
pub(crate) fn read_all_within(path: &std::path::Path, budget: &crate::MemoryBudget) -> Result<Vec<u8>> {
    memopt_core::input_file::check_regular(path, MAX_DATA_FILE_BYTES).map_err(|e| input_error(path, e))?;
    let len = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?.len();
    budget.check(len, || format!("reading {}", path.display()))?;
    read_all(path)
}
