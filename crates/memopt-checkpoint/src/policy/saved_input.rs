//! The input a checkpointed segment keeps for its recomputation.

use crate::Result;
use memopt_compress::{CompressorKind, Packed};
use memopt_core::{Device, MemoryKind, Tensor};

/// A segment input kept for recomputation: compressed when it carries the spike flag and the
/// compressor packs spikes (the choice is static, from the flag, identical on every device),
/// and moved to host memory under the offload policy.
pub(crate) struct SavedInput {
    packed: Packed,
    /// The device to bring the payload back to, when it was offloaded.
    home: Option<Device>,
}

impl SavedInput {
    /// Keeps `x` with `compressor` (binary compressors fall back to no compression for inputs
    /// that are not spikes); with `host`, the payload moves there as offloaded memory.
    pub(crate) fn save(x: &Tensor, compressor: CompressorKind, host: Option<Device>) -> Result<SavedInput> {
        let kind = if compressor.requires_binary() && !x.is_spike() {
            CompressorKind::Null
        } else {
            compressor
        };
        let mut packed = kind.build().compress(x)?;
        if kind == CompressorKind::Null && x.kind() == MemoryKind::Activation {
            x.set_kind(MemoryKind::SavedForBackward);
        }
        let mut home = None;
        if let Some(host) = host {
            packed = packed.to_device(host, MemoryKind::Offloaded)?;
            home = Some(x.device());
        }
        Ok(SavedInput { packed, home })
    }

    /// The original tensor, back on its device (recorded as an activation when it had to be
    /// recreated).
    pub(crate) fn restore(self) -> Result<Tensor> {
        self.restore_kept()
    }

    /// The original tensor, keeping the saved payload (for a segment that recomputes a chunk
    /// more than once: chunked BatchNorm passes).
    pub(crate) fn restore_kept(&self) -> Result<Tensor> {
        let moved;
        let packed = match self.home {
            Some(device) => {
                let kind = if self.packed.kind() == CompressorKind::Null {
                    MemoryKind::Activation
                } else {
                    MemoryKind::Packed
                };
                moved = self.packed.to_device(device, kind)?;
                &moved
            }
            None => &self.packed,
        };
        Ok(packed.decompress()?)
    }
}
