//! Memory policies: what a module keeps for backward. Policies are data — a [`Plan`] is a list
//! of (path, policy) pairs applied by assignment to a [`PolicyTable`]; the model is never
//! rewritten.

mod checkpoint;
mod chunk_grads;
mod chunk_passes;
mod dispatch;
mod plan;
mod saved_input;
mod saved_state;
mod segment;
mod table;

pub use checkpoint::time_spans;
pub use plan::{PLAN_VERSION, Plan, PlanEntry, run_target};
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
    /// smaller than f32) instead of as f32, and its backward reads it one time step at a time;
    /// an input of pooled spikes (an average pool's output) is kept as spike counts, one byte
    /// per value (4x smaller), and decompressed whole for its backward. Exact: spikes are 0
    /// and 1, pooled spikes a count over the window. Costs packing the input in forward and
    /// unpacking it in backward.
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
        /// How the forward's later passes get the input of the first training BatchNorm (only
        /// with `chunks > 1`).
        #[serde(default, skip_serializing_if = "BatchNormInputs::is_recomputed")]
        batch_norm_inputs: BatchNormInputs,
    },
    /// Like `Checkpoint`, but the saved input (its compressed payload, per time chunk) moves to
    /// host memory until backward needs it: on a GPU it then takes no GPU memory between the
    /// segment's forward and its backward, at the cost of copying it out and back. On the CPU,
    /// whose memory is the host's, it is kept where it is (tracked as offloaded).
    Offload {
        /// Compressor for the saved input (applied before the move).
        #[serde(default = "default_compressor")]
        compressor: CompressorKind,
        /// Number of time chunks (1 = whole sequence at once).
        #[serde(default = "default_chunks")]
        chunks: usize,
        /// How backward gets each time chunk's starting neuron states (only with `chunks > 1`;
        /// kept boundary states move to host memory too, each brought back when backward
        /// reaches its chunk).
        #[serde(default, skip_serializing_if = "ChunkBoundaries::is_kept")]
        boundaries: ChunkBoundaries,
        /// How the forward's later passes get the input of the first training BatchNorm (only
        /// with `chunks > 1`).
        #[serde(default, skip_serializing_if = "BatchNormInputs::is_recomputed")]
        batch_norm_inputs: BatchNormInputs,
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
    /// Saved at the start of every `m`-th chunk (chunks `0, m, 2m, ...`; `m >= 1`), each kept
    /// until backward reaches its chunk; backward rebuilds the states of a chunk in between by
    /// running the chunks since the last saved boundary again, as [`ChunkBoundaries::Replayed`]
    /// does from the entry. `m = 1` keeps them all; `m >= k` replays them all. For 4 chunks and
    /// `m = 2`: one boundary state kept instead of three, two chunk forwards per backward pass
    /// instead of six. In a plan file `{"kept_every": m}`.
    KeptEvery(usize),
}

impl ChunkBoundaries {
    /// Whether boundary states are kept (the default; plan files omit it).
    pub fn is_kept(&self) -> bool {
        *self == ChunkBoundaries::Kept
    }

    /// Whether the forward saves the states chunk `chunk` starts from (chunk 0's always: they
    /// are the segment's entry states).
    pub fn keeps_state_at(&self, chunk: usize) -> bool {
        match *self {
            ChunkBoundaries::Kept => true,
            ChunkBoundaries::Replayed => chunk == 0,
            ChunkBoundaries::KeptEvery(m) => chunk.is_multiple_of(m.max(1)),
        }
    }

    /// The chunk whose saved states the backward replays from to rebuild those of `chunk`: the
    /// last chunk at or before it that keeps its states ([`Self::keeps_state_at`]).
    pub fn replay_origin(&self, chunk: usize) -> usize {
        match *self {
            ChunkBoundaries::Kept => chunk,
            ChunkBoundaries::Replayed => 0,
            ChunkBoundaries::KeptEvery(m) => chunk - chunk % m.max(1),
        }
    }

    /// Boundaries (chunk starts after the first) whose states the forward keeps, of `chunks`.
    pub fn kept_boundaries(&self, chunks: usize) -> usize {
        (1..chunks).filter(|&i| self.keeps_state_at(i)).count()
    }
}

/// How the forward of a time-chunked segment with training BatchNorms gets, after the
/// statistics pass of its first BatchNorm, that BatchNorm's input for the passes that follow
/// (the statistics passes of later BatchNorms and the pass giving the outputs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchNormInputs {
    /// Recomputed: every pass runs each chunk from the segment's input again (the layers before
    /// the BatchNorm once more per pass). Nothing is held between the passes.
    #[default]
    Recomputed,
    /// Kept: the statistics pass keeps each chunk's input of the first BatchNorm, and the later
    /// passes start each chunk there, skipping the layers before it. Those inputs (one
    /// full-length tensor in all) are held from the statistics pass until the last pass has
    /// read them. Only for segments whose modules before their first BatchNorm are stateless
    /// layers that the chain runs one after the other (convolutions, pooling, linear layers).
    Kept,
}

impl BatchNormInputs {
    /// Whether the inputs are recomputed (the default; plan files omit it).
    pub fn is_recomputed(&self) -> bool {
        *self == BatchNormInputs::Recomputed
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
            batch_norm_inputs: BatchNormInputs::Recomputed,
        }
    }

    /// Offloading with `compressor` in `chunks` time chunks whose boundary states are kept.
    pub const fn offload(compressor: CompressorKind, chunks: usize) -> Policy {
        Policy::Offload {
            compressor,
            chunks,
            boundaries: ChunkBoundaries::Kept,
            batch_norm_inputs: BatchNormInputs::Recomputed,
        }
    }

    /// Whether the policy recomputes in backward.
    pub fn recomputes(&self) -> bool {
        !matches!(self, Policy::Store | Policy::StorePacked)
    }

    /// Number of time chunks (1 unless a chunked checkpoint or offload).
    pub fn chunks(&self) -> usize {
        match self {
            Policy::Checkpoint { chunks, .. } | Policy::Offload { chunks, .. } => *chunks,
            Policy::Store | Policy::StorePacked => 1,
        }
    }

    /// How backward gets chunk boundary states ([`ChunkBoundaries::Kept`] for the policies
    /// that do not recompute).
    pub fn boundaries(&self) -> ChunkBoundaries {
        match self {
            Policy::Checkpoint { boundaries, .. } | Policy::Offload { boundaries, .. } => *boundaries,
            Policy::Store | Policy::StorePacked => ChunkBoundaries::Kept,
        }
    }

    /// How a chunked segment's later forward passes get its first BatchNorm's input
    /// ([`BatchNormInputs::Recomputed`] for the policies that do not recompute).
    pub fn batch_norm_inputs(&self) -> BatchNormInputs {
        match self {
            Policy::Checkpoint {
                batch_norm_inputs, ..
            }
            | Policy::Offload {
                batch_norm_inputs, ..
            } => *batch_norm_inputs,
            Policy::Store | Policy::StorePacked => BatchNormInputs::Recomputed,
        }
    }

    /// This policy with `inputs` as its [`BatchNormInputs`] (unchanged for the policies that do
    /// not recompute).
    pub fn with_batch_norm_inputs(self, inputs: BatchNormInputs) -> Policy {
        match self {
            Policy::Checkpoint {
                compressor,
                chunks,
                boundaries,
                ..
            } => Policy::Checkpoint {
                compressor,
                chunks,
                boundaries,
                batch_norm_inputs: inputs,
            },
            Policy::Offload {
                compressor,
                chunks,
                boundaries,
                ..
            } => Policy::Offload {
                compressor,
                chunks,
                boundaries,
                batch_norm_inputs: inputs,
            },
            other => other,
        }
    }

    /// The compressor of the saved input, for the policies that recompute.
    pub fn compressor(&self) -> Option<CompressorKind> {
        match self {
            Policy::Checkpoint { compressor, .. } | Policy::Offload { compressor, .. } => Some(*compressor),
            Policy::Store | Policy::StorePacked => None,
        }
    }

    /// Whether the saved input moves to host memory ([`Policy::Offload`]).
    pub fn offloads(&self) -> bool {
        matches!(self, Policy::Offload { .. })
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, compressor) = match self {
            Policy::Store => return f.write_str("store"),
            Policy::StorePacked => return f.write_str("store(packed)"),
            Policy::Checkpoint { compressor, .. } => ("checkpoint", compressor),
            Policy::Offload { compressor, .. } => ("offload", compressor),
        };
        write!(f, "{name}({}", compressor.name())?;
        let chunks = self.chunks();
        if chunks > 1 {
            write!(f, ", chunks={chunks}")?;
            match self.boundaries() {
                ChunkBoundaries::Kept => {}
                ChunkBoundaries::Replayed => f.write_str(", replayed boundaries")?,
                ChunkBoundaries::KeptEvery(m) => write!(f, ", boundaries kept every {m} chunks")?,
            }
            if self.batch_norm_inputs() == BatchNormInputs::Kept {
                f.write_str(", BatchNorm inputs kept")?;
            }
        }
        f.write_str(")")
    }
}
