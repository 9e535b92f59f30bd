//! The file formats event recordings come in, and reading one recording of any of them.

use crate::budget::MemoryBudget;
use crate::error::{DataError, Result};
use crate::events::{Events, read_events_npz_within};
use std::path::Path;

/// A file format of event recordings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFormat {
    /// N-MNIST: ATIS `.bin`, 40 bits per event (34x34).
    AtisBin,
    /// CIFAR10-DVS: jAER AEDAT 2 `.aedat` (128x128).
    Aedat2,
    /// DVS128 Gesture: AEDAT 3.1 `.aedat` (128x128).
    Aedat3,
    /// SpikingJelly's `events_np` cache: `.npz` with arrays `t`, `x`, `y`, `p`.
    Npz,
}

impl EventFormat {
    /// Every format with its CLI name.
    pub const ALL: [(&'static str, EventFormat); 4] = [
        ("nmnist", EventFormat::AtisBin),
        ("cifar10dvs", EventFormat::Aedat2),
        ("dvs128", EventFormat::Aedat3),
        ("npz", EventFormat::Npz),
    ];

    /// The format named `name` (`nmnist`, `cifar10dvs`, `dvs128`, `npz`).
    pub fn from_name(name: &str) -> Result<EventFormat> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                DataError::Invalid(format!(
                    "unknown event format '{name}': expected one of nmnist, cifar10dvs, dvs128, npz"
                ))
            })
    }

    /// The file extension recordings of this format have.
    pub fn extension(self) -> &'static str {
        match self {
            EventFormat::AtisBin => "bin",
            EventFormat::Aedat2 | EventFormat::Aedat3 => "aedat",
            EventFormat::Npz => "npz",
        }
    }

    /// Sensor size `(H, W)` of the dataset this format comes from (`None` for npz).
    pub fn sensor_size(self) -> Option<(usize, usize)> {
        match self {
            EventFormat::AtisBin => Some((34, 34)),
            EventFormat::Aedat2 | EventFormat::Aedat3 => Some((128, 128)),
            EventFormat::Npz => None,
        }
    }

    /// Reads one recording.
    pub fn read(self, path: &Path) -> Result<Events> {
        self.read_within(path, &MemoryBudget::unlimited())
    }

    /// Reads one recording within `budget`: the file's bytes and its events (17 bytes each,
    /// counted from the file first) are refused before they are allocated when they exceed it.
    pub fn read_within(self, path: &Path, budget: &MemoryBudget) -> Result<Events> {
        match self {
            EventFormat::AtisBin => crate::atis_bin::read_within(path, budget),
            EventFormat::Aedat2 => crate::aedat2::read_within(path, budget),
            EventFormat::Aedat3 => crate::aedat3::read_within(path, budget),
            EventFormat::Npz => read_events_npz_within(path, budget),
        }
    }
}
