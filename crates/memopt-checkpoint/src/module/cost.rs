//! What a module's forward costs, from shapes alone: FLOPs and bytes moved.

use memopt_core::Shape;
use serde::{Deserialize, Serialize};

/// Bytes of one element of the compute type (f32). Costs are computed from shapes, so they
/// assume every value is an f32.
pub const COMPUTE_ELEM_BYTES: u64 = 4;

/// The cost of one forward call of a module, computed from the shapes of its inputs and outputs
/// without running it. Planners turn it into time with throughput constants.
///
/// Costs are time estimates, not byte accounting: a figure beyond `u64` (a Meta step of
/// absurd size, whose bytes the tracker refuses anyway) saturates at `u64::MAX` rather than
/// wrapping to a small, wrong time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleCost {
    /// Floating-point operations (a multiply-add counts as 2).
    pub flops: u64,
    /// Bytes read and written (inputs, outputs, weights and kept intermediates; f32).
    pub bytes: u64,
}

impl ModuleCost {
    /// No cost (containers, views).
    pub const ZERO: ModuleCost = ModuleCost { flops: 0, bytes: 0 };

    /// An elementwise layer: one FLOP per output element, every input and output read or
    /// written once.
    pub fn elementwise(inputs: &[Shape], outputs: &[Shape]) -> ModuleCost {
        ModuleCost {
            flops: elems(outputs),
            bytes: f32_bytes(inputs).saturating_add(f32_bytes(outputs)),
        }
    }

    /// Sum of two costs.
    pub fn plus(self, other: ModuleCost) -> ModuleCost {
        ModuleCost {
            flops: self.flops.saturating_add(other.flops),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

/// Total elements of `shapes`.
pub fn elems(shapes: &[Shape]) -> u64 {
    shapes
        .iter()
        .fold(0u64, |n, s| n.saturating_add(s.elem_count() as u64))
}

/// Bytes of `shapes` as f32 tensors.
pub fn f32_bytes(shapes: &[Shape]) -> u64 {
    elems(shapes).saturating_mul(COMPUTE_ELEM_BYTES)
}
