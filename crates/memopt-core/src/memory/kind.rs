//! What a tracked buffer is used for.

use serde::{Deserialize, Serialize};

/// The role of a tracked buffer. Profilers break the peak down by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Trainable parameters.
    Parameter,
    /// Non-trainable module buffers (BatchNorm running statistics).
    Buffer,
    /// Gradients, of parameters and of activations.
    Gradient,
    /// Optimizer state (momentum, Adam moments).
    OptimizerState,
    /// Model inputs and labels.
    Input,
    /// Forward outputs not (yet) kept for backward.
    Activation,
    /// Tensors kept by the tape for backward.
    SavedForBackward,
    /// Compressed payloads (bit-packed spikes, sparse indices, half copies).
    Packed,
    /// Copies moved to host memory by the offload policy.
    Offloaded,
    /// Temporary kernel buffers (im2col columns, reductions).
    Workspace,
}

impl MemoryKind {
    /// Number of kinds.
    pub const COUNT: usize = 10;

    /// All kinds, in declaration order.
    pub const ALL: [MemoryKind; Self::COUNT] = [
        MemoryKind::Parameter,
        MemoryKind::Buffer,
        MemoryKind::Gradient,
        MemoryKind::OptimizerState,
        MemoryKind::Input,
        MemoryKind::Activation,
        MemoryKind::SavedForBackward,
        MemoryKind::Packed,
        MemoryKind::Offloaded,
        MemoryKind::Workspace,
    ];

    /// Position in [`MemoryKind::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The kind at position `i` of [`MemoryKind::ALL`].
    pub const fn from_index(i: usize) -> Option<MemoryKind> {
        if i < Self::COUNT { Some(Self::ALL[i]) } else { None }
    }

    /// snake_case name as used in JSON and tables.
    pub const fn name(self) -> &'static str {
        match self {
            MemoryKind::Parameter => "parameter",
            MemoryKind::Buffer => "buffer",
            MemoryKind::Gradient => "gradient",
            MemoryKind::OptimizerState => "optimizer_state",
            MemoryKind::Input => "input",
            MemoryKind::Activation => "activation",
            MemoryKind::SavedForBackward => "saved_for_backward",
            MemoryKind::Packed => "packed",
            MemoryKind::Offloaded => "offloaded",
            MemoryKind::Workspace => "workspace",
        }
    }
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
