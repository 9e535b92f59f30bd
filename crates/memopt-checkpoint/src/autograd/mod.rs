//! Tape-based reverse-mode autograd, the floor under the forward context. The tape is an
//! explicit value held by the [`Recorder`] of a step: each op records a [`BackwardOp`] holding
//! what its backward needs ([`SavedTensor`]s, recorded by the tracker as saved-for-backward);
//! backward runs the nodes in reverse, drops each node (and so frees its saved tensors) as soon
//! as it has run, and accumulates parameter gradients into [`Gradients`]. The context nodes run
//! in is a type parameter ([`BackwardContext`]): nothing here knows modules or policies.

mod backward;
mod gradients;
mod param_readers;
mod recorder;
mod saved;
mod states;
mod tape;
mod var;

pub(crate) use backward::fixed_slots;
pub use backward::{Backward, BackwardContext, BackwardGrads, BackwardOp, InputSlot};
pub use gradients::Gradients;
pub(crate) use param_readers::ParamReaders;
pub(crate) use recorder::PausedTape;
pub use recorder::{Record, RecordedOutputs, Recorder, UpdateHook};
pub use saved::{LayerInputRead, SavedLayerInput, SavedTensor};
pub use states::StateStore;
pub use tape::Tape;
pub use var::{Var, VarArg, VarId};
