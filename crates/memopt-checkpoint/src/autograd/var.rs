//! A tensor flowing through a forward pass, with its identity on the tape.

use memopt_core::{Shape, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifier of a value recorded on a tape, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub(crate) u64);

static NEXT_VAR: AtomicU64 = AtomicU64::new(0);

impl VarId {
    pub(crate) fn fresh() -> VarId {
        VarId(NEXT_VAR.fetch_add(1, Ordering::Relaxed))
    }
}

/// A value in the forward pass: a tensor and, when gradients flow to it, its id on the tape.
/// Constants (inputs without gradient, anything computed while not recording) have no id.
#[derive(Debug, Clone)]
pub struct Var {
    tensor: Tensor,
    id: Option<VarId>,
}

impl Var {
    /// A value that needs no gradient.
    pub fn constant(tensor: Tensor) -> Var {
        Var { tensor, id: None }
    }

    pub(crate) fn tracked(tensor: Tensor, id: VarId) -> Var {
        Var { tensor, id: Some(id) }
    }

    /// The tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The tensor, consuming the value.
    pub fn into_tensor(self) -> Tensor {
        self.tensor
    }

    /// The tape id, if gradients flow to this value.
    pub fn id(&self) -> Option<VarId> {
        self.id
    }

    /// Whether gradients flow to this value.
    pub fn requires_grad(&self) -> bool {
        self.id.is_some()
    }

    /// Shape of the tensor.
    pub fn shape(&self) -> &Shape {
        self.tensor.shape()
    }

    /// Dimensions of the tensor.
    pub fn dims(&self) -> &[usize] {
        self.tensor.dims()
    }

    /// Whether the values are known to be spikes.
    pub fn is_spike(&self) -> bool {
        self.tensor.is_spike()
    }
}
