//! NumPy `.npz` archives (zip files of `.npy` arrays), stored or deflated, as
//! `np.savez` / `np.savez_compressed` write them.

use crate::budget::{MemoryBudget, with_capacity};
use crate::error::{DataError, MAX_DATA_FILE_BYTES, Result};
use crate::npy::{self, NpyArray};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Reads every array of an `.npz` file, in archive order, named without `.npy`.
pub fn read(path: &Path) -> Result<Vec<(String, NpyArray)>> {
    read_within(path, &MemoryBudget::unlimited())
}

/// [`read`], with each entry's inflated size bounded: the size its header declares is
/// compared with [`MAX_DATA_FILE_BYTES`] and with `budget`, less what the arrays read before it
/// hold, before anything is inflated; an entry that inflates past its declared size is an error
/// (an archive bomb never gets further than its own claim).
pub fn read_within(path: &Path, budget: &MemoryBudget) -> Result<Vec<(String, NpyArray)>> {
    read_entries(path, budget, None)
}

/// The arrays of `path` (only the one named `wanted`, when given) within `budget`.
fn read_entries(path: &Path, budget: &MemoryBudget, wanted: Option<&str>) -> Result<Vec<(String, NpyArray)>> {
    memopt_core::input_file::check_regular(path, MAX_DATA_FILE_BYTES)
        .map_err(|e| crate::error::input_error(path, e))?;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| DataError::file(path, format!("not a readable .npz (zip) archive: {e}")))?;
    let mut out = Vec::new();
    // bytes the arrays read so far hold (their values, widened as parsed)
    let mut held = 0u64;
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| DataError::file(path, format!("entry {i} of the archive: {e}")))?;
        let name = entry
            .name()
            .map_err(|e| DataError::file(path, format!("entry {i} has an unreadable name: {e}")))?
            .to_string();
        let Some(stem) = name.strip_suffix(".npy") else {
            continue;
        };
        if wanted.is_some_and(|w| w != stem) {
            continue;
        }
        let budget = budget.less(held, "the archive's arrays read before it")?;
        let declared = entry.size();
        if declared > MAX_DATA_FILE_BYTES {
            return Err(DataError::file(
                path,
                format!(
                    "entry '{name}' declares {declared} bytes inflated; at most {MAX_DATA_FILE_BYTES} bytes are read"
                ),
            ));
        }
        budget.check(declared, || {
            format!("entry '{name}' of {} inflated", path.display())
        })?;
        let mut bytes = with_capacity(declared as usize)?;
        entry
            .take(declared + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| DataError::file(path, format!("entry '{name}': {e}")))?;
        if bytes.len() as u64 != declared {
            return Err(DataError::file(
                path,
                format!(
                    "entry '{name}' inflates to {} bytes, but its header declares {declared}: the archive is corrupt",
                    if bytes.len() as u64 > declared {
                        "more than that".to_string()
                    } else {
                        bytes.len().to_string()
                    }
                ),
            ));
        }
        let inner: PathBuf = path.join(&name);
        // the inflated bytes are held while they are parsed
        let array = npy::parse_within(&inner, &bytes, &budget.less(declared, "the inflated entry")?)?;
        held = held.saturating_add(array.bytes());
        out.push((stem.to_string(), array));
    }
    Ok(out)
}

/// The array `name` of an `.npz` file, or an error listing the arrays it has.
pub fn read_array(path: &Path, name: &str) -> Result<NpyArray> {
    read_array_within(path, name, &MemoryBudget::unlimited())
}

/// [`read_array`] within `budget` (see [`read_within`]).
pub fn read_array_within(path: &Path, name: &str, budget: &MemoryBudget) -> Result<NpyArray> {
    if let Some((_, a)) = read_entries(path, budget, Some(name))?.pop() {
        return Ok(a);
    }
    let names = array_names(path)?;
    Err(DataError::file(
        path,
        format!("no array '{name}' (it has: {})", names.join(", ")),
    ))
}

/// The names of the arrays of an `.npz` file (its `.npy` entries), without reading them.
fn array_names(path: &Path) -> Result<Vec<String>> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| DataError::file(path, format!("not a readable .npz (zip) archive: {e}")))?;
    Ok(zip
        .file_names()
        .filter_map(|n| n.ok()?.strip_suffix(".npy").map(str::to_string))
        .collect())
}

/// The bytes of a deflated `.npz` of `arrays` (like `np.savez_compressed`).
pub fn to_bytes(arrays: &[(&str, &NpyArray)]) -> std::result::Result<Vec<u8>, String> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(false);
    for (name, a) in arrays {
        zip.start_file(format!("{name}.npy"), opts)
            .map_err(|e| e.to_string())?;
        zip.write_all(&npy::to_bytes(&a.shape, &a.data))
            .map_err(|e| e.to_string())?;
    }
    Ok(zip.finish().map_err(|e| e.to_string())?.into_inner())
}

/// Writes arrays to a deflated `.npz` (like `np.savez_compressed`), replacing `path` only when
/// the whole file is written (see [`memopt_core::output_file`]).
pub fn write(path: &Path, arrays: &[(&str, &NpyArray)]) -> Result<()> {
    let bytes =
        to_bytes(arrays).map_err(|m| DataError::file(path, format!("writing the archive failed: {m}")))?;
    crate::write_replacing(path, &bytes)
}
