//! The input a checkpointed segment keeps for its recomputation.

use crate::Result;
use crate::autograd::{Var, VarId};
use memopt_compress::{CompressorKind, Packed, PackedSpikes};
use memopt_core::{DType, Device, MemoryKind};

/// How the input is kept.
enum Kept {
    /// f32 spikes, bit-packed: restored packed, so that a convolution or linear layer reads them
    /// one time step at a time and no op unpacks more than it holds.
    Spikes(PackedSpikes),
    /// Anything else, with the compressor the policy names (restored whole; spike counts are
    /// restored as counts, which a convolution or linear layer keeps for its backward instead
    /// of the decompressed tensor).
    Packed(Packed),
}

/// A segment input kept for recomputation: compressed when it carries the spike flag and the
/// compressor packs spikes, kept as spike counts when it is pooled spikes
/// ([`CompressorKind::keeping`]; the choice is static, from what is known about the values,
/// identical on every device), and moved to host memory under the offload policy.
pub(crate) struct SavedInput {
    kept: Kept,
    /// The device to bring the payload back to, when it was offloaded.
    home: Option<Device>,
}

impl SavedInput {
    /// Keeps `x` with `compressor` (binary compressors keep pooled spikes as spike counts and
    /// fall back to no compression for other inputs that are not spikes); with `host`, the
    /// payload moves there as offloaded memory. f32 spikes under BitSpike are kept as
    /// [`PackedSpikes`] (already packed ones share their payload), and a value that is already
    /// spike counts shares its payload too.
    pub(crate) fn save(x: &Var, compressor: CompressorKind, host: Option<Device>) -> Result<SavedInput> {
        let bit_spike = compressor == CompressorKind::BitSpike;
        let kept = match (x.as_packed(), x.as_dense()) {
            (Some(spikes), _) if bit_spike => Kept::Spikes(spikes.clone()),
            (_, Some(t)) if bit_spike && t.is_spike() && t.dtype() == DType::F32 => {
                Kept::Spikes(PackedSpikes::pack(t)?)
            }
            _ if compressor.keeping(x.known_values()) == CompressorKind::SpikeCounts
                && let Some(counts) = x.as_counts() =>
            {
                Kept::Packed(counts.clone())
            }
            _ => {
                let x = x.tensor()?;
                let kind = compressor.keeping(x.known_values());
                let packed = kind.build().compress(&x)?;
                if kind == CompressorKind::Null && x.kind() == MemoryKind::Activation {
                    x.set_kind(MemoryKind::SavedForBackward);
                }
                Kept::Packed(packed)
            }
        };
        let Some(host) = host else {
            return Ok(SavedInput { kept, home: None });
        };
        let kept = match kept {
            Kept::Spikes(s) => Kept::Spikes(s.to_device(host, MemoryKind::Offloaded)?),
            Kept::Packed(p) => Kept::Packed(p.to_device(host, MemoryKind::Offloaded)?),
        };
        Ok(SavedInput {
            kept,
            home: Some(x.device()),
        })
    }

    /// The original value, back on its device, with tape id `id`: packed spikes stay packed
    /// (their payload recorded as packed memory when it had to be brought back); anything else
    /// is decompressed (recorded as an activation when it had to be recreated).
    pub(crate) fn restore(self, id: Option<VarId>) -> Result<Var> {
        self.restore_kept(id)
    }

    /// [`SavedInput::restore`], keeping the saved payload (for a segment that recomputes a
    /// chunk more than once: chunked BatchNorm passes). Packed spikes kept on their device share
    /// their payload with the restored value.
    pub(crate) fn restore_kept(&self, id: Option<VarId>) -> Result<Var> {
        let moved;
        let packed = match (&self.kept, self.home) {
            (Kept::Spikes(s), None) => return Ok(Var::packed(s.clone(), id)),
            (Kept::Spikes(s), Some(device)) => {
                return Ok(Var::packed(s.to_device(device, MemoryKind::Packed)?, id));
            }
            (Kept::Packed(p), None) => p,
            (Kept::Packed(p), Some(device)) => {
                let kind = if p.kind() == CompressorKind::Null {
                    MemoryKind::Activation
                } else {
                    MemoryKind::Packed
                };
                moved = p.to_device(device, kind)?;
                &moved
            }
        };
        if packed.kind() == CompressorKind::SpikeCounts {
            return Ok(Var::counts(packed.clone(), id));
        }
        let t = packed.decompress()?;
        Ok(match id {
            Some(id) => Var::tracked(t, id),
            None => Var::constant(t),
        })
    }
}
