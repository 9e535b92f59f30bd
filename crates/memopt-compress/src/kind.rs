//! The compressor kinds and their static properties.

use crate::{BitSpike, BoolU8, Compressor, Half, NullCompressor, SparseCompressor, SpikeCounts};
use memopt_core::{DType, KnownValues};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which compressor to use for a saved tensor. Serializes as its [`CompressorKind::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressorKind {
    /// Keep the tensor as it is (no copy, no saving).
    Null,
    /// 1 bit per value, numpy `packbits(bitorder='little')` layout; binary input only.
    BitSpike,
    /// 1 byte (0 or 1) per value; binary input only.
    U8,
    /// Row-major indices of the ones (u16 when there are at most 65,536 elements, else u32);
    /// binary input only; the size depends on the data.
    Sparse,
    /// 1 byte per value, the count of spikes it averages; pooled spikes only
    /// ([`memopt_core::KnownValues::PooledSpikes`]), exact.
    SpikeCounts,
    /// Lossy: values rounded to f16. Opt-in only, never chosen automatically.
    F16,
    /// Lossy: values rounded to bf16. Opt-in only, never chosen automatically.
    #[serde(rename = "bf16")]
    BF16,
}

impl CompressorKind {
    /// Every kind, in declaration order.
    pub const ALL: [CompressorKind; 7] = [
        CompressorKind::Null,
        CompressorKind::BitSpike,
        CompressorKind::U8,
        CompressorKind::Sparse,
        CompressorKind::SpikeCounts,
        CompressorKind::F16,
        CompressorKind::BF16,
    ];

    /// The compressor of this kind.
    pub fn build(self) -> Arc<dyn Compressor> {
        match self {
            CompressorKind::Null => Arc::new(NullCompressor),
            CompressorKind::BitSpike => Arc::new(BitSpike),
            CompressorKind::U8 => Arc::new(BoolU8),
            CompressorKind::Sparse => Arc::new(SparseCompressor),
            CompressorKind::SpikeCounts => Arc::new(SpikeCounts),
            CompressorKind::F16 => Arc::new(Half::new(DType::F16)),
            CompressorKind::BF16 => Arc::new(Half::new(DType::BF16)),
        }
    }

    /// Whether decompression restores the input exactly (all but the half kinds; binary kinds
    /// restore -0.0 as +0.0, which compares equal).
    pub fn is_lossless(self) -> bool {
        !matches!(self, CompressorKind::F16 | CompressorKind::BF16)
    }

    /// Whether the input must hold only 0 and 1 (checked unless the tensor has the spike flag).
    pub fn requires_binary(self) -> bool {
        matches!(
            self,
            CompressorKind::BitSpike | CompressorKind::U8 | CompressorKind::Sparse
        )
    }

    /// The compressor that keeps a value with `values` known about it when a policy names this
    /// one: a binary compressor keeps spikes itself, pooled spikes as [`CompressorKind::SpikeCounts`]
    /// and anything else as it is ([`CompressorKind::Null`]); other compressors keep
    /// everything. The choice depends only on what is known, never on data, so every device
    /// (Meta included) makes the same.
    pub fn keeping(self, values: KnownValues) -> CompressorKind {
        if !self.requires_binary() {
            return self;
        }
        match values {
            KnownValues::Spikes => self,
            KnownValues::PooledSpikes { .. } => CompressorKind::SpikeCounts,
            KnownValues::Any => CompressorKind::Null,
        }
    }

    /// snake_case name, as in JSON, plans and the command line.
    pub fn name(self) -> &'static str {
        match self {
            CompressorKind::Null => "null",
            CompressorKind::BitSpike => "bit_spike",
            CompressorKind::U8 => "u8",
            CompressorKind::Sparse => "sparse",
            CompressorKind::SpikeCounts => "spike_counts",
            CompressorKind::F16 => "f16",
            CompressorKind::BF16 => "bf16",
        }
    }
}

impl std::fmt::Display for CompressorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CompressorKind {
    type Err = String;
    /// Parses a [`CompressorKind::name`].
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        CompressorKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = CompressorKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown compressor '{s}': valid compressors are {}",
                    names.join(", ")
                )
            })
    }
}

/// The payload size a compressor will allocate for a shape, known without looking at data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedSize {
    /// Always exactly this many bytes.
    Exact(u64),
    /// Depends on the data (sparse); never more than `worst_case` bytes, which is also what the
    /// Meta device allocates.
    DataDependent {
        /// Largest possible payload, in bytes.
        worst_case: u64,
    },
}

impl PackedSize {
    /// The exact size, or the worst case when it depends on data (bytes).
    pub fn upper_bound(self) -> u64 {
        match self {
            PackedSize::Exact(b) | PackedSize::DataDependent { worst_case: b } => b,
        }
    }

    /// Whether the size is known exactly from the shape.
    pub fn is_exact(self) -> bool {
        matches!(self, PackedSize::Exact(_))
    }
}
