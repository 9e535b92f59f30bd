//! Output files replaced whole or not at all. Shared by every writer of user files (the CLI's
//! outputs, weights, frames, metrics), so that each keeps the same promises:
//!
//! - a file is written to a new temporary file in its directory (a name no one guesses, never an
//!   existing file or a planted link), flushed to disk and renamed over the old one; a failed
//!   write or rename removes the temporary file and leaves the old file;
//! - a symbolic link is followed: its target is replaced and the link stays;
//! - an existing device, pipe or socket (`/dev/null`, a FIFO) and a file descriptor's path
//!   (`/dev/stdout`, `/dev/fd/N`, also when it is `>> run.log`) are appended to in place, never
//!   replaced by a regular file;
//! - [`check_writable`] finds an unwritable destination before the work that produces it.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How an output path is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A regular file (the target of a symbolic link), new or replaced by a rename.
    Replace(PathBuf),
    /// An existing device, pipe or socket: written in place, as renaming over it would replace
    /// the node itself.
    InPlace(PathBuf),
}

/// The directory a file is in (`.` for a bare file name).
pub fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Paths that name an open file descriptor of this process (`/dev/stdout`, `/dev/fd/3`): written
/// in place, appended, even when the descriptor is a regular file (`>> run.log`), which a
/// rename would replace behind the shell's back.
fn names_a_descriptor(path: &Path) -> bool {
    let s = path.as_os_str().to_string_lossy();
    ["/dev/stdout", "/dev/stderr"].contains(&s.as_ref())
        || s.starts_with("/dev/fd/")
        || (s.starts_with("/proc/") && s.contains("/fd/"))
}

/// Where `path` is written: its final target after symbolic links (a dangling link's target
/// too), or in place for an existing device, pipe or socket, or a file descriptor's path.
pub fn destination(path: &Path) -> Destination {
    if names_a_descriptor(path) && path.exists() {
        return Destination::InPlace(path.to_path_buf());
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Destination::InPlace(path.to_path_buf()),
        Ok(_) => Destination::Replace(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())),
        Err(_) => Destination::Replace(link_target(path)),
    }
}

/// The path a dangling symbolic link points at (followed to the end), or `path` itself.
fn link_target(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    // A cycle of links ends the walk: the rename then fails with the system's error.
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(t) if t.is_absolute() => p = t,
            Ok(t) => p = parent(&p).join(t),
            Err(_) => break,
        }
    }
    p
}

/// A name no other process or earlier run guesses: the process id, the time in nanoseconds
/// and a counter, for temporary files and staging folders (`NAME.memopt-PID-NANOS-K`).
pub fn unique_suffix() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let k = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("memopt-{}-{nanos}-{k}", std::process::id())
}

/// A fresh temporary path for `path`: `.NAME.<unique>.tmp` in the same directory.
pub fn temp_path(path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a file name", path.display()),
        )
    })?;
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{}.tmp", unique_suffix()));
    Ok(parent(path).join(tmp))
}

/// Creates a new temporary file for `path` (never opening an existing file or following a
/// link planted at its name), retrying on a name already taken.
fn create_temp(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..8 {
        let tmp = temp_path(path)?;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// Writes `contents` to a new temporary file next to `path` (see [`temp_path`]), flushed to
/// disk, and returns its path; nothing is left behind when it fails.
pub fn write_temp(path: &Path, contents: &[u8]) -> std::io::Result<PathBuf> {
    let (tmp, mut f) = create_temp(path)?;
    let written = (|| {
        f.write_all(contents)?;
        f.sync_all()
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            // best effort: the temporary file is ours and useless
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Renames a temporary file from [`write_temp`] over `path`, removing it when that fails.
pub fn rename_over(tmp: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::rename(tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(tmp);
    })
}

/// Appends `contents` to an existing device, pipe or file descriptor's path.
pub fn write_in_place(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(contents)?;
    f.flush()
}

/// Writes `contents` to `path` whole or not at all (see the module documentation).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    match destination(path) {
        Destination::InPlace(p) => write_in_place(&p, contents),
        Destination::Replace(p) => {
            let tmp = write_temp(&p, contents)?;
            rename_over(&tmp, &p)
        }
    }
}

/// Writes several files whole or not at all, as far as renames allow: every file is written to
/// its temporary file first (a failure there leaves every old file), then all are renamed in
/// the order given, then devices and pipes are written in place. On error, the file that failed
/// and the system's error.
pub fn write_together(files: &[(&Path, &[u8])]) -> Result<(), (PathBuf, std::io::Error)> {
    // A directory in the way would fail its rename after others succeeded: refused first.
    if let Some(dir) = files.iter().find(|(p, _)| p.is_dir()) {
        let e = std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory; give a file name",
        );
        return Err((dir.0.to_path_buf(), e));
    }
    let mut temps: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(files.len());
    let mut in_place: Vec<(PathBuf, &[u8])> = Vec::new();
    for (given, contents) in files {
        match destination(given) {
            Destination::InPlace(p) => in_place.push((p, contents)),
            Destination::Replace(path) => match write_temp(&path, contents) {
                Ok(tmp) => temps.push((tmp, path)),
                Err(e) => {
                    for (tmp, _) in &temps {
                        let _ = std::fs::remove_file(tmp);
                    }
                    return Err((path, e));
                }
            },
        }
    }
    let mut failed = None;
    for (tmp, path) in &temps {
        if failed.is_some() {
            let _ = std::fs::remove_file(tmp);
        } else if let Err(e) = rename_over(tmp, path) {
            failed = Some((path.clone(), e));
        }
    }
    if let Some(f) = failed {
        return Err(f);
    }
    for (path, contents) in in_place {
        write_in_place(&path, contents).map_err(|e| (path.clone(), e))?;
    }
    Ok(())
}

/// Checks, before any work, that `path` can be written: a directory is an error, and so is a
/// directory that does not exist or refuses a new file (probed by creating and removing the
/// temporary file); an existing device or pipe must open for writing. Nothing is changed.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory; give a file name",
        ));
    }
    match destination(path) {
        // Opening a FIFO for writing would wait for a reader: only its permission is checked.
        Destination::InPlace(p) => {
            let meta = std::fs::metadata(&p)?;
            if meta.permissions().readonly() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "is read-only",
                ));
            }
            Ok(())
        }
        Destination::Replace(p) => {
            let dir = parent(&p);
            if !dir.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the directory {} does not exist", dir.display()),
                ));
            }
            let (tmp, _) = create_temp(&p)?;
            std::fs::remove_file(&tmp)
        }
    }
}

/// Whether two output paths name the same file: the same file after symbolic links when it
/// exists, else the same canonical directory and file name (a dangling link counts as its
/// target).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (resolved(a), resolved(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The path `path` names with every symbolic link resolved (a dangling link's target too),
/// also when it does not exist yet: its nearest existing ancestor canonicalized, the rest
/// appended. `None` when no ancestor resolves or a part is `..` below a missing folder.
pub fn resolved(path: &Path) -> Option<PathBuf> {
    let target = link_target(path);
    let mut existing = target.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(existing) {
            return Some(rest.iter().rev().fold(c, |p, name| p.join(name)));
        }
        rest.push(existing.file_name()?);
        existing = parent(existing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in `dir`.
    fn entries(dir: &Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    }

    #[test]
    fn files_are_replaced_links_followed_and_devices_written_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let target = dir.join("target.txt");
        std::fs::write(&target, "old").unwrap();
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert!(same_file(&link, &target));
        // A dangling link names its (future) target.
        let dangling = dir.join("dangling.txt");
        std::os::unix::fs::symlink(dir.join("later.txt"), &dangling).unwrap();
        assert!(same_file(&dangling, &dir.join("later.txt")));
        write_atomic(&dangling, b"x").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("later.txt")).unwrap(), "x");
        if Path::new("/dev/null").exists() {
            assert_eq!(
                destination(Path::new("/dev/null")),
                Destination::InPlace("/dev/null".into())
            );
            write_atomic(Path::new("/dev/null"), b"x").unwrap();
            check_writable(Path::new("/dev/null")).unwrap();
        }
        // Nothing is left behind, by a write or by a probe.
        check_writable(&dir.join("new.txt")).unwrap();
        let names = entries(dir);
        assert_eq!(names.len(), 4, "{names:?}");
        assert!(check_writable(dir).is_err());
        assert!(check_writable(&dir.join("missing/x.txt")).is_err());
    }

    #[test]
    fn files_written_together_stay_old_when_one_cannot_be_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let a = dir.join("a.safetensors");
        std::fs::write(&a, "old").unwrap();
        let b = dir.join("missing/b.safetensors");
        let e = write_together(&[(&a, b"new"), (&b, b"new")]).unwrap_err();
        assert_eq!(e.0, b);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "old");
        let names = entries(dir);
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[test]
    fn a_descriptor_path_is_appended_to_in_place() {
        assert_eq!(
            destination(Path::new("/dev/stdout")),
            Destination::InPlace("/dev/stdout".into())
        );
        assert!(names_a_descriptor(Path::new("/proc/self/fd/1")));
        assert!(!names_a_descriptor(Path::new("/dev/shm/plan.json")));
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // Renaming a file over a non-empty directory fails.
        let busy = dir.join("busy");
        std::fs::create_dir(&busy).unwrap();
        std::fs::write(busy.join("x"), "x").unwrap();
        let t = write_temp(&busy, b"data").unwrap();
        assert!(rename_over(&t, &busy).is_err());
        assert!(!t.exists());
    }
}
