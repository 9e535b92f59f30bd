//! Tape-based reverse-mode autograd. The tape is an explicit value owned by the forward context
//! ([`crate::Cx`]): each op records a [`BackwardOp`] holding what its backward needs
//! ([`SavedTensor`]s, recorded by the tracker as saved-for-backward); backward runs the nodes in
//! reverse, drops each node (and so frees its saved tensors) as soon as it has run, and
//! accumulates parameter gradients into [`Gradients`].

mod backward;
mod gradients;
mod param_readers;
mod saved;
mod states;
mod tape;
mod var;

pub(crate) use backward::Typed;
pub use backward::{Backward, BackwardGrads, BackwardOp, InputSlot};
pub use gradients::Gradients;
pub(crate) use param_readers::ParamReaders;
pub use saved::{LayerInputRead, SavedLayerInput, SavedTensor};
pub use states::StateStore;
pub use tape::Tape;
pub use var::{Var, VarArg, VarId};
