//! Optimizers. Their state (momentum, Adam moments) is allocated when they are created, as
//! tracked optimizer state, so every step — the first included — holds the same memory.

mod adam;
mod sgd;

pub use adam::Adam;
pub use sgd::Sgd;

use crate::Result;
use crate::autograd::Gradients;
use crate::model::Model;

/// Updates a model's parameters in place from one step's gradients.
pub trait Optimizer {
    /// Name for reports (`sgd`, `adam`).
    fn name(&self) -> &'static str;
    /// Applies one update; parameters without a gradient are left alone.
    fn step(&mut self, model: &Model, grads: &Gradients) -> Result<()>;
}
