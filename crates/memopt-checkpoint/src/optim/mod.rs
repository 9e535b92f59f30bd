//! Optimizers. Their state (momentum, Adam moments) is allocated when they are created, as
//! tracked optimizer state, so every step — the first included — holds the same memory.

mod adam;
mod sgd;

pub use adam::Adam;
pub use sgd::Sgd;

use crate::Result;
use crate::autograd::Gradients;
use crate::model::Model;
use crate::param::{Param, ParamId};
use memopt_core::Tensor;

/// One state tensor of an optimizer: the parameter it belongs to, its name in PyTorch's
/// optimizer state (`momentum_buffer`, `exp_avg`, `exp_avg_sq`) and the tensor itself (updated in
/// place, so writing into it restores the state).
#[derive(Debug, Clone)]
pub struct StateTensor {
    /// The parameter this state belongs to.
    pub param: ParamId,
    /// Name of the state entry, as in `torch.optim`'s per-parameter state.
    pub name: &'static str,
    /// The state, shaped like the parameter.
    pub tensor: Tensor,
}

/// Updates a model's parameters in place from one step's gradients.
pub trait Optimizer {
    /// Name for reports (`sgd`, `adam`).
    fn name(&self) -> &'static str;
    /// Applies one update; parameters without a gradient are left alone, as are those whose
    /// gradient is final (the update in backward applied it already), and a parameter the
    /// model lists under several paths (a shared weight) is updated once.
    fn step(&mut self, model: &Model, grads: &Gradients) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for (_, p) in model.params() {
            if !seen.insert(p.id()) || grads.is_final(p.id()) {
                continue;
            }
            if let Some(g) = grads.get(p.id()) {
                self.update(p, g)?;
            }
        }
        self.finish_step();
        Ok(())
    }
    /// Applies the current step's update to one parameter, exactly as [`Optimizer::step`]
    /// does to each (in any order: every parameter's update reads only its own gradient and
    /// state). Call [`Optimizer::finish_step`] once after the last parameter of the step.
    fn update(&mut self, param: &Param, grad: &Tensor) -> Result<()>;
    /// Counts the step whose parameters [`Optimizer::update`] updated.
    fn finish_step(&mut self);
    /// The learning rate the next step uses.
    fn learning_rate(&self) -> f32;
    /// Sets the learning rate of the following steps (schedules); must be finite and >= 0.
    fn set_learning_rate(&mut self, lr: f32) -> Result<()>;
    /// Every state tensor, in parameter order.
    fn state_tensors(&self) -> Vec<StateTensor>;
    /// Updates applied so far (PyTorch's `step`; for SGD, whether the momentum is initialised).
    fn step_count(&self) -> u64;
    /// Restores the update count (with the state tensors, a bit-identical continuation).
    fn set_step_count(&mut self, steps: u64);
}

/// Checks a learning rate given to [`Optimizer::set_learning_rate`].
fn check_lr(lr: f32) -> Result<()> {
    if lr.is_finite() && lr >= 0.0 {
        Ok(())
    } else {
        Err(crate::CheckpointError::InvalidInput(format!(
            "learning rate must be finite and >= 0, got {lr}"
        )))
    }
}
