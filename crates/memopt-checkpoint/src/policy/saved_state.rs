//! A neuron state a time chunk starts from, kept for the chunk's recomputation.

use crate::Result;
use crate::autograd::SavedTensor;
use memopt_core::{Device, MemoryKind, Tensor};

/// A chunk's starting neuron state: kept on its device, or under the offload policy moved to
/// host memory (tracked as offloaded) and brought back when backward reaches the chunk, so that
/// a GPU holds no boundary state between the segment's forward and its backward.
pub(crate) enum SavedState {
    /// On its device (re-tagged saved-for-backward when it was an activation).
    Kept(SavedTensor),
    /// In host memory, with the device to bring it back to.
    Offloaded {
        /// The host copy.
        copy: Tensor,
        /// The device it came from.
        home: Device,
    },
}

impl SavedState {
    /// Keeps `t`, moved to `host` when given (and another device than `t`'s).
    pub(crate) fn save(t: &Tensor, host: Option<Device>) -> Result<SavedState> {
        match host {
            Some(host) if host != t.device() => Ok(SavedState::Offloaded {
                copy: t.to_device_as(host, MemoryKind::Offloaded)?,
                home: t.device(),
            }),
            _ => Ok(SavedState::Kept(SavedTensor::new(t))),
        }
    }

    /// The state on its device: the kept tensor itself, or a copy brought back from the host
    /// (recorded as saved for backward; freed when the recomputation no longer reads it).
    pub(crate) fn restore(&self) -> Result<Tensor> {
        match self {
            SavedState::Kept(s) => Ok(s.tensor().clone()),
            SavedState::Offloaded { copy, home } => {
                Ok(copy.to_device_as(*home, MemoryKind::SavedForBackward)?)
            }
        }
    }
}
