//! Every file the command reads or writes goes through here.
//!
//! Inputs ([`read_input`]) must be regular files of at most [`MAX_INPUT_BYTES`] bytes, UTF-8,
//! with or without a byte-order mark; a directory, a device, a pipe or an oversized file is an
//! error naming the file and the limit, found before anything is read (and the read itself is
//! bounded, so a file that grows while it is read cannot make it run forever).
//!
//! Outputs ([`Outputs`]) are staged in memory and written only when the whole command has
//! succeeded ([`Outputs::commit`]); each file is written to a temporary file in the same
//! directory and renamed over the old one, so a failed or interrupted write leaves the old file
//! intact. The same path given for two outputs is a usage error, found before any work.

use crate::error::{CliError, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Largest model or plan file read, in bytes (16 MiB: a plan of every module of the largest zoo
/// model is under 100 KiB).
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The UTF-8 byte-order mark some editors write at the start of a file.
const BOM: &str = "\u{feff}";

/// Reads `path` as text: a regular file of at most [`MAX_INPUT_BYTES`] bytes, UTF-8 (a leading
/// byte-order mark is dropped). `what` names the file's role in errors (`model file`, `plan`).
pub fn read_input(path: &Path, what: &str) -> Result<String> {
    let invalid = |why: String| CliError::Invalid(format!("cannot read {} ({what}): {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => invalid("does not exist".into()),
        _ => CliError::read(path, e),
    })?;
    if meta.is_dir() {
        return Err(invalid("is a directory, not a file".into()));
    }
    if !meta.is_file() {
        return Err(invalid(
            "is not a regular file (a device, pipe or socket); give a JSON file".into(),
        ));
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(invalid(format!(
            "is {} bytes; model and plan files are at most {MAX_INPUT_BYTES} bytes",
            meta.len()
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| CliError::read(path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::read(path, e))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(invalid(format!(
            "grew past {MAX_INPUT_BYTES} bytes while it was read; model and plan files are at most that"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        invalid(format!(
            "is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok(match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
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

    /// Writes every staged file atomically (temporary file in the same directory, then rename).
    /// A file that cannot be written leaves its old contents and is reported by name.
    pub fn commit(self) -> Result<()> {
        for (path, contents) in &self.staged {
            write_atomic(path, contents)?;
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

/// Whether two output paths name the same file (same canonical directory and file name).
fn same_file(a: &Path, b: &Path) -> bool {
    let key = |p: &Path| {
        std::fs::canonicalize(parent(p))
            .ok()
            .map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Writes `contents` to `path` through a temporary file in the same directory, flushed to disk
/// and renamed over `path`; the temporary file is removed when anything fails.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
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
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::write(path, e)
    })
}
