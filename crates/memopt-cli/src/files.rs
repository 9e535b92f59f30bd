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
use std::io::Write;
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
    /// is a usage error, and so is a path whose directory does not exist or that is a
    /// directory. `named` pairs each option (`--out`) with its path, when given.
    pub fn new(named: &[(&str, Option<&Path>)]) -> Result<Outputs> {
        let given: Vec<(&str, &Path)> = named.iter().filter_map(|(f, p)| p.map(|p| (*f, p))).collect();
        for (i, (flag, path)) in given.iter().enumerate() {
            if path.is_dir() {
                return Err(CliError::Usage(format!(
                    "{flag} {} is a directory; give a file name",
                    path.display()
                )));
            }
            let dir = parent(path);
            if !dir.is_dir() {
                return Err(CliError::Usage(format!(
                    "{flag} {}: the directory {} does not exist",
                    path.display(),
                    dir.display()
                )));
            }
            for (other_flag, other) in &given[..i] {
                if same_file(path, other) {
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
        let mut temps: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(self.staged.len());
        let mut in_place: Vec<(&Path, &[u8])> = Vec::new();
        for (given, contents) in &self.staged {
            let path = match destination(given) {
                Destination::InPlace => {
                    in_place.push((given, contents));
                    continue;
                }
                Destination::Replace(path) => path,
            };
            match write_temp(&path, contents) {
                Ok(tmp) => temps.push((tmp, path)),
                Err(e) => {
                    for (tmp, _) in &temps {
                        let _ = std::fs::remove_file(tmp);
                    }
                    return Err(e);
                }
            }
        }
        let mut renamed = Ok(());
        for (tmp, path) in &temps {
            if renamed.is_ok() {
                renamed = std::fs::rename(tmp, path).map_err(|e| CliError::write(path, e));
            }
            if renamed.is_err() {
                let _ = std::fs::remove_file(tmp);
            }
        }
        renamed?;
        for (path, contents) in in_place {
            write_in_place(path, contents)?;
        }
        Ok(())
    }
}

/// The directory a file is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether two output paths name the same file: the same file after symbolic links when it
/// exists, else the same canonical directory and file name.
fn same_file(a: &Path, b: &Path) -> bool {
    let key = |p: &Path| {
        std::fs::canonicalize(p).ok().or_else(|| {
            std::fs::canonicalize(parent(p))
                .ok()
                .map(|d| d.join(p.file_name().unwrap_or_default()))
        })
    };
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// How an output path is written.
enum Destination {
    /// A regular file (the target of a symbolic link), new or replaced by a rename.
    Replace(PathBuf),
    /// An existing device, pipe or socket (`/dev/null`, `/dev/stdout`): written in place, as
    /// renaming over it would replace the device node itself.
    InPlace,
}

fn destination(path: &Path) -> Destination {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Destination::InPlace,
        Ok(_) => Destination::Replace(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())),
        Err(_) => Destination::Replace(path.to_path_buf()),
    }
}

/// Writes `contents` into an existing device or pipe.
fn write_in_place(path: &Path, contents: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| CliError::write(path, e))?;
    f.write_all(contents)
        .and_then(|()| f.flush())
        .map_err(|e| CliError::write(path, e))
}

/// Writes `contents` to `path` through a temporary file in the same directory, flushed to disk
/// and renamed over `path` (over the target of a symbolic link); the temporary file is removed
/// when anything fails. An existing device or pipe is written in place.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let path = match destination(path) {
        Destination::InPlace => return write_in_place(path, contents),
        Destination::Replace(p) => p,
    };
    let path = path.as_path();
    let tmp = write_temp(path, contents)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::write(path, e)
    })
}

/// Writes `contents` to a temporary file next to `path`, flushed to disk, and returns its path;
/// nothing is left behind when it fails.
fn write_temp(path: &Path, contents: &[u8]) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| CliError::Usage(format!("{} is not a file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".memopt-{}.tmp", std::process::id()));
    let tmp = parent(path).join(tmp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()
    })();
    written.map(|()| tmp.clone()).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::write(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::{Destination, destination};
    use std::path::Path;

    /// A device is written in place, never renamed over (that would replace the device node).
    #[test]
    fn devices_are_written_in_place_and_files_replaced() {
        if Path::new("/dev/null").exists() {
            assert!(matches!(
                destination(Path::new("/dev/null")),
                Destination::InPlace
            ));
        }
        let new = std::env::temp_dir().join(format!("memopt-destination-{}", std::process::id()));
        assert!(matches!(destination(&new), Destination::Replace(p) if p == new));
    }
}
