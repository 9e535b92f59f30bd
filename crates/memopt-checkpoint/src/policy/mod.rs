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

pub use plan::{PLAN_VERSION, Plan, PlanEntry};
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
    /// across them, and backward recomputes chunk by chunk in reverse.
    Checkpoint {
        /// Compressor for the saved input.
        #[serde(default = "default_compressor")]
        compressor: CompressorKind,
        /// Number of time chunks (1 = whole sequence at once).
        #[serde(default = "default_chunks")]
        chunks: usize,
    },
    /// Like `Checkpoint` with one chunk, but the saved input is moved to host memory until
    /// backward needs it.
    Offload {
        /// Compressor for the saved input (applied before the move).
        #[serde(default = "default_compressor")]
        compressor: CompressorKind,
    },
}

fn default_compressor() -> CompressorKind {
    CompressorKind::BitSpike
}

fn default_chunks() -> usize {
    1
}

impl Policy {
    /// Checkpointing with bit-packed spike inputs and no chunking.
    pub const CHECKPOINT: Policy = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 1,
    };

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
            } => write!(f, "checkpoint({})", compressor.name()),
            Policy::Checkpoint { compressor, chunks } => {
                write!(f, "checkpoint({}, chunks={chunks})", compressor.name())
            }
            Policy::Offload { compressor } => write!(f, "offload({})", compressor.name()),
        }
    }
}
