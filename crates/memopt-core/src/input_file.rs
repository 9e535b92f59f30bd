//! Bounded reads of input files: a regular file of at most a given size, read with that bound
//! so that a file growing while it is read cannot make the read run forever. Shared by every
//! reader of user files (model descriptions, plans, datasets, weights).

use std::io::Read;
use std::path::Path;

/// Why an input file was not read. The messages name neither the file nor its role: callers
/// add both (`cannot read PATH (model file): is a directory, not a file`).
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    /// No file at the path.
    #[error("does not exist")]
    NotFound,
    /// A directory.
    #[error("is a directory, not a file")]
    Directory,
    /// A device, pipe or socket (e.g. `/dev/zero`).
    #[error("is not a regular file (a device, pipe or socket)")]
    NotRegular,
    /// Larger than the limit.
    #[error("is {len} bytes; at most {max} bytes are read")]
    TooLarge {
        /// Its size, in bytes.
        len: u64,
        /// The limit, in bytes.
        max: u64,
    },
    /// It grew past the limit while it was read.
    #[error("grew past {max} bytes while it was read; at most that is read")]
    Grew {
        /// The limit, in bytes.
        max: u64,
    },
    /// Not UTF-8 text.
    #[error("is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The operating system refused (permissions, I/O error).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The UTF-8 byte-order mark some editors write at the start of a file.
const BOM: &str = "\u{feff}";

/// Checks that `path` is a regular file of at most `max` bytes, before anything is read.
pub fn check_regular(path: &Path, max: u64) -> Result<(), InputFileError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => InputFileError::NotFound,
        _ => InputFileError::Io(e),
    })?;
    if meta.is_dir() {
        return Err(InputFileError::Directory);
    }
    if !meta.is_file() {
        return Err(InputFileError::NotRegular);
    }
    if meta.len() > max {
        return Err(InputFileError::TooLarge { len: meta.len(), max });
    }
    Ok(())
}

/// The bytes of `path`: a regular file of at most `max` bytes (see [`check_regular`]), read
/// with that bound.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, InputFileError> {
    check_regular(path, max)?;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len().min(max);
    let mut bytes = Vec::new();
    // the size the file has now, reserved fallibly: too little memory is an error, not an abort
    bytes
        .try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes to read it"),
            )
        })?;
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(InputFileError::Grew { max });
    }
    Ok(bytes)
}

/// The text of `path`, read as [`read_bounded`] does: UTF-8, a leading byte-order mark dropped.
pub fn read_bounded_text(path: &Path, max: u64) -> Result<String, InputFileError> {
    let bytes = read_bounded(path, max)?;
    let text = String::from_utf8(bytes).map_err(|e| InputFileError::NotUtf8 {
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok(match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_regular_utf8_files_are_read() {
        // Removed with everything in it when dropped, also when the test fails.
        let tmp = tempfile::Builder::new()
            .prefix("memopt-input-file-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let ok = dir.join("ok.json");
        std::fs::write(&ok, "\u{feff}{}").unwrap();
        assert_eq!(read_bounded_text(&ok, 16).unwrap(), "{}");
        assert!(matches!(
            read_bounded_text(&ok, 2),
            Err(InputFileError::TooLarge { len: 5, max: 2 })
        ));
        assert!(matches!(
            read_bounded_text(dir, 16),
            Err(InputFileError::Directory)
        ));
        assert!(matches!(
            read_bounded_text(&dir.join("missing"), 16),
            Err(InputFileError::NotFound)
        ));
        let bad = dir.join("bad.json");
        std::fs::write(&bad, b"{\xff}").unwrap();
        assert!(matches!(
            read_bounded_text(&bad, 16),
            Err(InputFileError::NotUtf8 { offset: 1 })
        ));
        if Path::new("/dev/zero").exists() {
            assert!(matches!(
                read_bounded(Path::new("/dev/zero"), 16),
                Err(InputFileError::NotRegular)
            ));
        }
    }
}
