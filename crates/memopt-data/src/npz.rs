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
/// compared with [`MAX_DATA_FILE_BYTES`] and `budget` before anything is inflated, and an
/// entry that inflates past its declared size is an error (an archive bomb never gets further
/// than its own claim).
pub fn read_within(path: &Path, budget: &MemoryBudget) -> Result<Vec<(String, NpyArray)>> {
    memopt_core::input_file::check_regular(path, MAX_DATA_FILE_BYTES)
        .map_err(|e| crate::error::input_error(path, e))?;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| DataError::file(path, format!("not a readable .npz (zip) archive: {e}")))?;
    let mut out = Vec::new();
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
        out.push((stem.to_string(), npy::parse_within(&inner, &bytes, budget)?));
    }
    Ok(out)
}

/// The array `name` of an `.npz` file, or an error listing the arrays it has.
pub fn read_array(path: &Path, name: &str) -> Result<NpyArray> {
    read_array_within(path, name, &MemoryBudget::unlimited())
}

/// [`read_array`] within `budget` (see [`read_within`]).
pub fn read_array_within(path: &Path, name: &str, budget: &MemoryBudget) -> Result<NpyArray> {
    let arrays = read_within(path, budget)?;
    let names: Vec<String> = arrays.iter().map(|(n, _)| n.clone()).collect();
    arrays
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a)
        .ok_or_else(|| DataError::file(path, format!("no array '{name}' (it has: {})", names.join(", "))))
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
