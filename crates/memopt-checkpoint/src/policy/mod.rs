//! Memory policies: what a module keeps for backward. Policies are data — a [`Plan`] is a list
//! of (path, policy) pairs applied by assignment to a [`PolicyTable`]; the model is never
//! rewritten.

pub(crate) mod batch_stats;
pub(crate) mod checkpoint;
mod chunk_grads;
mod chunk_passes;
mod plan;
mod saved_input;
mod segment;
mod table;

pub use checkpoint::time_spans;
pub use plan::{PLAN_VERSION, Plan, PlanEntry, run_target};
pub(crate) use segment::Segment;
pub use table::{ChildRange, PolicyTable, RunShape};

use memopt_compress::CompressorKind;
use serde::{Deserialize, Serialize};

/// What a module keeps for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Policy {
    /// Keep everything backward needs (the default).
    Store,
    /// Keep everything backward needs, but every convolution and linear layer at or below the
    /// module (that is not recomputed) keeps a spike input bit-packed (1 bit per value, 32x
    /// smaller than f32) instead of as f32, and its backward reads it one time step at a time.
    /// Exact: spikes are 0 and 1. Costs packing the input in forward and unpacking it in
    /// backward.
    StorePacked,
    /// Keep only the input (compressed when it is a spike tensor and the compressor packs
    /// spikes), the RNG state and the neuron states it starts from; recompute in backward.
    /// With `chunks = k > 1` the time dimension runs in k nearly equal chunks, state carried
    /// across them, and backward recomputes chunk by chunk in reverse; `boundaries` says how
    /// backward gets the neuron states each chunk starts from.
    Checkpoint {
        /// Compressor for the saved input.
        #[serde(default = "default_compressor")]
        compressor: CompressorKind,
        /// Number of time chunks (1 = whole sequence at once).
        #[serde(default = "default_chunks")]
        chunks: usize,
        /// How backward gets each time chunk's starting neuron states (only with `chunks > 1`).
        #[serde(default, skip_serializing_if = "ChunkBoundaries::is_kept")]
        boundaries: ChunkBoundaries,
    },
    /// Like `Checkpoint` with one chunk, but the saved input is moved to host memory until
    /// backward needs it.
    Offload {
        /// Compressor for the saved input (applied before the move).
        #[serde(default = "default_compressor")]
        compressor: CompressorKind,
    },
}

/// How a time-chunked segment's backward gets the neuron states each chunk starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkBoundaries {
    /// Saved by the forward at every chunk boundary (one time step of every neuron's state per
    /// boundary), each kept until backward reaches its chunk.
    #[default]
    Kept,
    /// Not saved: backward rebuilds a chunk's starting states by running the chunks before it
    /// again, forward only and without recording, from the segment's entry states (the same
    /// saved inputs and random stream, so the same bits). No boundary state is held across the
    /// backward; it costs `k (k - 1) / 2` extra chunk forwards per backward pass (and per
    /// BatchNorm gradient-sums pass) for `k` chunks.
    Replayed,
}

impl ChunkBoundaries {
    /// Whether boundary states are kept (the default; plan files omit it).
    pub fn is_kept(&self) -> bool {
        *self == ChunkBoundaries::Kept
    }
}

fn default_compressor() -> CompressorKind {
    CompressorKind::BitSpike
}

fn default_chunks() -> usize {
    1
}

impl Policy {
    /// Checkpointing with bit-packed spike inputs and no chunking.
    pub const CHECKPOINT: Policy = Policy::checkpoint(CompressorKind::BitSpike, 1);

    /// Checkpointing with `compressor` in `chunks` time chunks whose boundary states are kept.
    pub const fn checkpoint(compressor: CompressorKind, chunks: usize) -> Policy {
        Policy::Checkpoint {
            compressor,
            chunks,
            boundaries: ChunkBoundaries::Kept,
        }
    }

    /// Whether the policy recomputes in backward.
    pub fn recomputes(&self) -> bool {
        !matches!(self, Policy::Store | Policy::StorePacked)
    }

    /// Number of time chunks (1 unless chunked checkpointing).
    pub fn chunks(&self) -> usize {
        match self {
            Policy::Checkpoint { chunks, .. } => *chunks,
            _ => 1,
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Store => f.write_str("store"),
            Policy::StorePacked => f.write_str("store(packed)"),
            Policy::Checkpoint {
                compressor,
                chunks: 1,
                ..
            } => write!(f, "checkpoint({})", compressor.name()),
            Policy::Checkpoint {
                compressor,
                chunks,
                boundaries: ChunkBoundaries::Kept,
            } => write!(f, "checkpoint({}, chunks={chunks})", compressor.name()),
            Policy::Checkpoint {
                compressor,
                chunks,
                boundaries: ChunkBoundaries::Replayed,
            } => write!(
                f,
                "checkpoint({}, chunks={chunks}, replayed boundaries)",
                compressor.name()
            ),
            Policy::Offload { compressor } => write!(f, "offload({})", compressor.name()),
        }
    }
}
