//! A tensor flowing through a forward pass, with its identity on the tape.

use memopt_core::kernels::Operand;
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

/// A value an op may write its result over: lent (`&var`, only read) or handed over (`var`).
/// A handed-over value whose tensor nothing else holds (no saved copy, no other handle) may
/// hold the result in place ([`Operand`]); which happens depends only on handles, so Meta and
/// the CPU allocate alike. A call site chooses by giving up its value.
#[derive(Debug)]
pub enum VarArg<'a> {
    /// Borrowed: read, never written.
    Lent(&'a Var),
    /// Owned by the op: its tensor may hold the result.
    Given(Var),
}

impl<'a> VarArg<'a> {
    /// The value, however it was passed.
    pub fn var(&self) -> &Var {
        match self {
            VarArg::Lent(v) => v,
            VarArg::Given(v) => v,
        }
    }

    /// The tensor as a kernel operand (handed over when the value was).
    pub fn into_operand(self) -> Operand<'a> {
        match self {
            VarArg::Lent(v) => Operand::Lent(v.tensor()),
            VarArg::Given(v) => Operand::Given(v.into_tensor()),
        }
    }
}

impl<'a> From<&'a Var> for VarArg<'a> {
    fn from(v: &'a Var) -> Self {
        VarArg::Lent(v)
    }
}

impl From<Var> for VarArg<'_> {
    fn from(v: Var) -> Self {
        VarArg::Given(v)
    }
}
