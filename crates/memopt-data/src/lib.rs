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
pub mod budget;
pub mod dataset;
pub mod device_batches;
mod error;
pub mod event_format;
pub mod events;
pub mod frames;
pub mod loader;
pub mod npy;
pub mod npz;
pub mod resize;
pub mod training;
pub mod weights;

pub use budget::MemoryBudget;
pub use dataset::{Dataset, SampleSource, split_train_test};
pub use device_batches::{DeviceBatch, DeviceBatches};
pub use error::{DataError, MAX_DATA_FILE_BYTES, Result};
pub use event_format::EventFormat;
pub use events::Events;
pub use frames::{FrameSpec, Frames, SplitBy, frame_count, integrate, integrate_within};
pub use loader::{BatchLoader, BatchValues, HostBatch, Staging, shuffled};
pub use resize::{resize_bilinear_aa, resize_within};

use std::path::Path;

/// Writes `bytes` to `path` whole or not at all (see [`memopt_core::output_file`]): through a
/// temporary file in the same folder renamed over it (over a symbolic link's target); an
/// existing device or pipe is written in place.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    memopt_core::output_file::write_atomic(path, bytes).map_err(|e| DataError::io(path, e))
}
