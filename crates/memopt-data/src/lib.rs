//! memopt-data: event-camera datasets in the formats SpikingJelly reads, frames integrated
//! exactly as SpikingJelly integrates them, the train/test split, a background batch loader,
//! and weights exchanged with PyTorch in safetensors under `state_dict()` names.
//!
//! ```no_run
//! use memopt_data::{EventFormat, FrameSpec, SplitBy, integrate};
//! let events = EventFormat::AtisBin.read("00002.bin".as_ref()).unwrap();
//! let spec = FrameSpec::Number { frames: 10, split_by: SplitBy::Number };
//! let frames = integrate(&events, spec, 34, 34).unwrap(); // [10, 2, 34, 34] counts
//! # let _ = frames;
//! ```
#![warn(missing_docs)]

pub mod aedat2;
pub mod aedat3;
pub mod atis_bin;
pub mod dataset;
mod error;
pub mod events;
pub mod frames;
pub mod loader;
pub mod npy;
pub mod npz;
pub mod resize;
pub mod training;
pub mod weights;

pub use dataset::{Dataset, SampleSource, split_train_test};
pub use error::{DataError, MAX_DATA_FILE_BYTES, Result};
pub use events::{EventFormat, Events};
pub use frames::{FrameSpec, Frames, SplitBy, integrate};
pub use loader::{BatchLoader, HostBatch, shuffled};
pub use resize::resize_bilinear_aa;

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder renamed over it, so
/// `path` is replaced only when everything was written.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        // best effort: the partial file is ours and useless
        let _ = std::fs::remove_file(&tmp);
        return Err(DataError::io(path, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| DataError::io(path, e))
}
