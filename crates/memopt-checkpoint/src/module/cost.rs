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

    /// A layer where each output element is a dot product of `per_output` inputs and weights
    /// (linear, convolution): `2 · out_elems · per_output` FLOPs (plus one per output with a
    /// bias); bytes of input, output and every parameter.
    pub fn weighted(
        inputs: &[Shape],
        outputs: &[Shape],
        per_output: u64,
        bias: bool,
        params: &[(&'static str, &crate::Param)],
    ) -> ModuleCost {
        let out = elems(outputs);
        let weights = params
            .iter()
            .fold(0u64, |n, (_, p)| n.saturating_add(p.elem_count() as u64));
        ModuleCost {
            flops: out
                .saturating_mul(per_output)
                .saturating_mul(2)
                .saturating_add(if bias { out } else { 0 }),
            bytes: f32_bytes(inputs)
                .saturating_add(f32_bytes(outputs))
                .saturating_add(weights.saturating_mul(COMPUTE_ELEM_BYTES)),
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
