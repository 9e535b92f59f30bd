//! Every file the command reads or writes goes through here.
//!
//! Inputs ([`read_input`]) must be regular files of at most [`MAX_INPUT_BYTES`] bytes, UTF-8,
//! with or without a byte-order mark; a directory, a device, a pipe or an oversized file is an
//! error naming the file and the limit, found before anything is read (and the read itself is
//! bounded, so a file that grows while it is read cannot make it run forever).
//!
//! Outputs ([`Outputs`]) are staged in memory and written only when the whole command has
//! succeeded ([`Outputs::commit`]); each file is written to a temporary file in the same
//! directory and renamed over the old one (over the target of a symbolic link), so a failed or
//! interrupted write leaves the old file intact. An existing device or pipe (`/dev/null`,
//! `/dev/stdout`) is written in place, never replaced. The same path given for two outputs
//! (also through a symbolic link) is a usage error, found before any work.

use crate::error::{CliError, Result};
use memopt_core::input_file::{InputFileError, read_bounded_text};
use memopt_core::output_file;
use std::path::{Path, PathBuf};

/// Largest model or plan file read, in bytes (16 MiB: a plan of every module of the largest zoo
/// model is under 100 KiB); the library's limit for model descriptions.
pub const MAX_INPUT_BYTES: u64 = memopt_checkpoint::zoo::custom::MAX_DESCRIPTION_BYTES;

/// Reads `path` as text: a regular file of at most [`MAX_INPUT_BYTES`] bytes, UTF-8 (a leading
/// byte-order mark is dropped). `what` names the file's role in errors (`model file`, `plan`).
pub fn read_input(path: &Path, what: &str) -> Result<String> {
    read_bounded_text(path, MAX_INPUT_BYTES).map_err(|e| match e {
        InputFileError::Io(io) => CliError::read(path, io),
        InputFileError::NotRegular => CliError::Invalid(format!(
            "cannot read {} ({what}): {e}; give a JSON file",
            path.display()
        )),
        e => CliError::Invalid(format!("cannot read {} ({what}): {e}", path.display())),
    })
}

/// Output files of one command, written together at the end.
#[derive(Debug, Default)]
pub struct Outputs {
    staged: Vec<(PathBuf, Vec<u8>)>,
}

impl Outputs {
    /// Checks the output paths of a command before any work: two options naming the same file
    /// is a usage error, and so is a path that cannot be written (a directory, a directory that
    /// does not exist or refuses a new file). `named` pairs each option (`--out`) with its
    /// path, when given.
    pub fn new(named: &[(&str, Option<&Path>)]) -> Result<Outputs> {
        let given: Vec<(&str, &Path)> = named.iter().filter_map(|(f, p)| p.map(|p| (*f, p))).collect();
        for (i, (flag, path)) in given.iter().enumerate() {
            check_output(flag, path)?;
            for (other_flag, other) in &given[..i] {
                if output_file::same_file(path, other) {
                    return Err(CliError::Usage(format!(
                        "{other_flag} and {flag} name the same file {}; give each output its own path",
                        path.display()
                    )));
                }
            }
        }
        Ok(Outputs::default())
    }

    /// Stages `contents` for `path`; nothing is written before [`Outputs::commit`].
    pub fn stage(&mut self, path: &Path, contents: impl Into<Vec<u8>>) {
        self.staged.push((path.to_path_buf(), contents.into()));
    }

    /// Writes every staged file atomically: each to a temporary file in its directory first,
    /// and only when all are written are they renamed over the old files. A file that cannot
    /// be written is reported by name and leaves every old file intact.
    pub fn commit(self) -> Result<()> {
        let files: Vec<(&Path, &[u8])> = self
            .staged
            .iter()
            .map(|(p, c)| (p.as_path(), c.as_slice()))
            .collect();
        output_file::write_together(&files).map_err(|(path, e)| CliError::write(&path, e))
    }
}

/// The usage error for an output `flag` that cannot be written at `path`, found before any
/// work (see [`output_file::check_writable`]).
pub fn check_output(flag: &str, path: &Path) -> Result<()> {
    output_file::check_writable(path)
        .map_err(|e| CliError::Usage(format!("{flag} {} cannot be written: {e}", path.display())))
}

/// Whether the file `path` would be written inside the folder `dir` or a folder below it
/// (through symbolic links too).
pub fn lies_under(path: &Path, dir: &Path) -> bool {
    match (output_file::resolved(path), std::fs::canonicalize(dir)) {
        (Some(p), Ok(dir)) => p.starts_with(dir),
        _ => false,
    }
}

/// Refuses outputs written inside the dataset folder `data` (they would change the data or
/// become part of it).
pub fn check_outside_data(outputs: &[(&str, Option<&Path>)], data: &Path) -> Result<()> {
    for (flag, path) in outputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p))) {
        if lies_under(path, data) {
            return Err(CliError::Usage(format!(
                "{flag} {} lies inside the dataset {}; write outputs outside --data",
                path.display(),
                data.display()
            )));
        }
    }
    Ok(())
}

/// Writes `contents` to `path` whole or not at all: through a temporary file in the same
/// directory, flushed to disk and renamed over `path` (over the target of a symbolic link); an
/// existing device or pipe is written in place.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    output_file::write_atomic(path, contents).map_err(|e| CliError::write(path, e))
}
