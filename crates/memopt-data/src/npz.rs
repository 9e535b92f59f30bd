//! NumPy `.npz` archives (zip files of `.npy` arrays), stored or deflated, as
//! `np.savez` / `np.savez_compressed` write them.

use crate::error::{DataError, Result};
use crate::npy::{self, NpyArray};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Reads every array of an `.npz` file, in archive order, named without `.npy`.
pub fn read(path: &Path) -> Result<Vec<(String, NpyArray)>> {
    memopt_core::input_file::check_regular(path, crate::error::MAX_DATA_FILE_BYTES)
        .map_err(|e| crate::error::input_error(path, e))?;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| DataError::file(path, format!("not a readable .npz (zip) archive: {e}")))?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| DataError::file(path, format!("entry {i} of the archive: {e}")))?;
        let name = entry
            .name()
            .map_err(|e| DataError::file(path, format!("entry {i} has an unreadable name: {e}")))?
            .to_string();
        let Some(stem) = name.strip_suffix(".npy") else {
            continue;
        };
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| DataError::file(path, format!("entry '{name}': {e}")))?;
        let inner: PathBuf = path.join(&name);
        out.push((stem.to_string(), npy::parse(&inner, &bytes)?));
    }
    Ok(out)
}

/// The array `name` of an `.npz` file, or an error listing the arrays it has.
pub fn read_array(path: &Path, name: &str) -> Result<NpyArray> {
    let arrays = read(path)?;
    let names: Vec<String> = arrays.iter().map(|(n, _)| n.clone()).collect();
    arrays
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a)
        .ok_or_else(|| DataError::file(path, format!("no array '{name}' (it has: {})", names.join(", "))))
}

/// Writes arrays to a deflated `.npz` (like `np.savez_compressed`). The file is written to a
/// temporary name next to `path` and renamed, so `path` is replaced only when all succeeded.
pub fn write(path: &Path, arrays: &[(&str, &NpyArray)]) -> Result<()> {
    let tmp = path.with_extension("npz.partial");
    let result = (|| -> std::result::Result<(), String> {
        let file = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(file));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(false);
        for (name, a) in arrays {
            zip.start_file(format!("{name}.npy"), opts)
                .map_err(|e| e.to_string())?;
            zip.write_all(&npy::to_bytes(&a.shape, &a.data))
                .map_err(|e| e.to_string())?;
        }
        let mut inner = zip.finish().map_err(|e| e.to_string())?;
        inner.flush().map_err(|e| e.to_string())?;
        Ok(())
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|e| DataError::io(path, e)),
        Err(m) => {
            // best effort: the partial file is ours and useless
            let _ = std::fs::remove_file(&tmp);
            Err(DataError::file(path, format!("writing the archive failed: {m}")))
        }
    }
}
