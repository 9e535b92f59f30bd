//! memopt-checkpoint: tape autograd, spiking-network modules, per-module memory policies with
//! exact recomputation, and the model zoo.
//!
//! A [`Model`] is a tree of named modules (paths like `features.3.neuron`). Each node can carry a
//! [`Policy`] — store, checkpoint or offload (each with a compressor and time chunks) — assigned from a
//! [`Plan`] without rewriting the model. Checkpointed segments save their (bit-packed) input, the
//! RNG state and the neuron states they start from, and recompute in backward with gradients
//! bit-identical to storing everything. A plan may also update each parameter in backward, as
//! soon as its gradient is final ([`Plan::update_in_backward`]), freeing the gradient there.
//!
//! ```
//! use memopt_checkpoint::{zoo, Plan, Policy};
//! use memopt_core::Device;
//! let spec = zoo::entry("spiking-mlp").unwrap().small;
//! let mut model = zoo::build("spiking-mlp", &spec, Device::META, 0).unwrap();
//! model.apply_plan(&Plan::from_entries([("1", Policy::CHECKPOINT)])).unwrap();
//! assert_eq!(model.plan().entries.len(), 1);
//! ```
#![warn(missing_docs)]

pub mod autograd;
mod context;
mod error;
pub mod model;
pub mod module;
pub mod ops;
pub mod optim;
pub mod param;
pub mod policy;
mod stop;
pub mod strict_json;
pub mod train;
pub mod zoo;

pub use autograd::{Gradients, Record, UpdateHook, Var};
pub use context::{Cx, Dispatch, Recording};
pub use error::{CheckpointError, Result};
pub use model::{InputSpec, Model};
pub use module::{Module, PlannerHints};
pub use param::{Buffer, Param, ParamId};
pub use policy::{
    BatchNormInputs, ChunkBoundaries, PLAN_VERSION, Plan, PlanEntry, Policy, PolicyTable, RunShape,
    run_target, time_spans,
};
pub use stop::{Forward, Stop};
pub use train::{Batch, StepOptions, StepOutput, Target, Trainer};
