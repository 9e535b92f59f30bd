//! One training step: forward, loss, backward, update — every byte tracked.

use crate::autograd::{Gradients, Var};
use crate::context::{Cx, Recording};
use crate::model::Model;
use crate::optim::Optimizer;
use crate::param::{Param, ParamId};
use crate::{CheckpointError, Result, ops};
use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{DType, Philox, RngState, Tensor};
use std::collections::HashMap;

/// What a step's loss compares the output with.
#[derive(Debug, Clone)]
pub enum Target {
    /// Class labels (i64 `[N]`): cross-entropy of the output averaged over time (firing rates
    /// for `[T, N, C]` outputs; the output itself for `[N, C]`).
    Labels(Tensor),
    /// Values shaped like the time-averaged output: mean squared error.
    Values(Tensor),
}

/// One batch: input `[T, N, ...]` and its target.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Model input.
    pub input: Tensor,
    /// Loss target.
    pub target: Target,
}

/// What a step keeps for the caller beyond the loss (tests compare these across policies).
#[derive(Debug, Clone, Copy, Default)]
pub struct StepOptions {
    /// Return the parameter gradients (otherwise they are freed after the update, or, under a
    /// plan updating in backward, as soon as each is final: keeping them then holds them to the
    /// end of the step, which raises its peak).
    pub keep_grads: bool,
    /// Compute and return the gradient of the input.
    pub input_grad: bool,
    /// Return the final neuron states. Without it, each neuron's final state is released as
    /// soon as nothing in the step can read it (after the neuron runs, or after the last time
    /// chunk of a chunked segment), so the step's peak does not hold them; with it, every final
    /// state is held from the neuron's forward to the end of the step. Gradients, statistics
    /// and parameters are bit-identical either way.
    pub keep_states: bool,
    /// Return the time-averaged output `[N, C]` (for accuracy).
    pub keep_output: bool,
    /// Skip the optimizer update (gradients only).
    pub skip_update: bool,
}

/// The result of a step.
#[derive(Debug, Default)]
pub struct StepOutput {
    /// Loss value (`None` on the Meta device, which has no data).
    pub loss: Option<f32>,
    /// Parameter gradients, when asked for.
    pub grads: Option<Gradients>,
    /// Input gradient, when asked for.
    pub input_grad: Option<Tensor>,
    /// Final membrane state of every neuron, by module path, when asked for.
    pub final_states: Vec<(String, Tensor)>,
    /// The time-averaged output `[N, C]` the loss compared, when asked for.
    pub output: Option<Tensor>,
}

/// Runs training steps of one model with one optimizer and one random stream.
pub struct Trainer {
    optimizer: Box<dyn Optimizer>,
    rng: Philox,
    steps: u64,
}

impl Trainer {
    /// A trainer drawing dropout masks from stream `seed`.
    pub fn new(optimizer: Box<dyn Optimizer>, seed: u64) -> Self {
        Trainer {
            optimizer,
            rng: Philox::new(seed),
            steps: 0,
        }
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The random stream's position.
    pub fn rng_state(&self) -> RngState {
        self.rng.state()
    }

    /// The optimizer (learning rate, state tensors).
    pub fn optimizer(&self) -> &dyn Optimizer {
        self.optimizer.as_ref()
    }

    /// The optimizer, to set its learning rate or restore its step count.
    pub fn optimizer_mut(&mut self) -> &mut dyn Optimizer {
        self.optimizer.as_mut()
    }

    /// Puts the trainer where a saved run stopped: `steps` taken and the random stream at
    /// `rng` (with the optimizer's state restored, the next step is bit-identical).
    pub fn restore(&mut self, steps: u64, rng: RngState) {
        self.steps = steps;
        self.rng.set_state(rng);
    }

    /// One step. Input, target and plan are checked before anything runs, so a rejected batch
    /// leaves the model untouched.
    ///
    /// Under a plan updating in backward ([`crate::Plan::update_in_backward`]) each parameter
    /// is updated as soon as no op still to run in backward reads it, and its gradient is freed
    /// there; the parameters after the step are bit-identical to those of the update after
    /// backward (each parameter's update reads only its own gradient and optimizer state). An
    /// error during its backward (a kernel's, or running out of memory) can leave some
    /// parameters and their optimizer state updated and the step uncounted: restore the model
    /// and the optimizer (a saved run) before training on.
    pub fn step(&mut self, model: &Model, batch: &Batch, opts: StepOptions) -> Result<StepOutput> {
        check_target(model, batch)?;
        if model.params().is_empty() && !opts.input_grad {
            return Err(CheckpointError::NothingToTrain(model.name().to_string()));
        }
        let mut cx = Cx::new(
            model.device(),
            model.policies(),
            self.rng.clone(),
            Recording::On,
            model.is_training(),
        );
        // Without the caller reading them, the final states go as soon as nothing reads them.
        cx.set_keep_final_states(opts.keep_states);
        let update_in_backward = model.policies().updates_in_backward() && !opts.skip_update;
        if update_in_backward {
            let params: HashMap<ParamId, &Param> =
                model.params().into_iter().map(|(_, p)| (p.id(), p)).collect();
            let optimizer = &mut self.optimizer;
            cx.update_in_backward(
                // A parameter the model does not list is left alone, as the update after
                // backward leaves it.
                Box::new(move |id, grad| match params.get(&id) {
                    Some(p) => optimizer.update(p, grad),
                    None => Ok(()),
                }),
                opts.keep_grads,
            );
        }
        let (loss, output, x_id) = {
            let _fwd = enter_scope(Scope::new("", Phase::Forward));
            let x = cx.leaf(batch.input.clone(), opts.input_grad);
            let x_id = x.id();
            let out = model.forward(&mut cx, x)?;
            let (loss, rate) = loss(&mut cx, out, &batch.target)?;
            (
                loss,
                opts.keep_output.then(|| rate.into_tensor()).transpose()?,
                x_id,
            )
        };
        let loss_value = loss.as_dense().and_then(|t| t.to_scalar_f32().ok());
        let mut leaves = cx.backward(&loss)?;
        drop(loss);
        let grads = cx.take_grads();
        self.rng = cx.rng().clone();
        let final_states = if opts.keep_states {
            cx.states()
                .under("")
                .into_iter()
                .map(|(p, v)| Ok((p.to_string(), v.into_tensor()?)))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        drop(cx);
        if !opts.skip_update {
            // Under the update in backward, `step` updates only the parameters whose gradient
            // is not final (none in a training step) and counts the step.
            let _opt = enter_scope(Scope::new("", Phase::Optimizer));
            self.optimizer.step(model, &grads)?;
        }
        self.steps += 1;
        Ok(StepOutput {
            loss: loss_value,
            grads: opts.keep_grads.then_some(grads),
            input_grad: x_id.and_then(|id| leaves.remove(&id)),
            final_states,
            output,
        })
    }
}

/// Time-averaged output (`[T, N, C]` -> `[N, C]`; rank-2 outputs pass through) and the loss.
/// Returns the loss and the time-averaged output it compared.
fn loss<'m>(cx: &mut Cx<'m>, out: Var, target: &Target) -> Result<(Var, Var)> {
    let rate = if out.dims().len() >= 3 {
        ops::mean_dim(cx, &out, 0)?
    } else {
        out
    };
    match target {
        Target::Labels(l) => ops::cross_entropy(cx, &rate, l),
        Target::Values(v) => ops::mse(cx, &rate, v),
    }
    .map(|l| (l, rate))
}

fn check_target(model: &Model, batch: &Batch) -> Result<()> {
    model.check_input(&batch.input)?;
    let n = batch.input.dims()[1];
    let bad = |m: String| Err(CheckpointError::InvalidInput(m));
    match &batch.target {
        Target::Labels(l) => {
            if l.dims() != [n] || l.dtype() != DType::I64 {
                return bad(format!(
                    "labels must be i64 of shape [{n}], got {} {}",
                    l.dtype(),
                    l.shape()
                ));
            }
            if l.device() != batch.input.device() {
                return bad(format!(
                    "labels are on {} but the input is on {}",
                    l.device(),
                    batch.input.device()
                ));
            }
            let classes = model.spec().classes as i64;
            if let Ok(v) = l.to_vec::<i64>()
                && let Some((i, c)) = v.iter().enumerate().find(|(_, c)| !(0..classes).contains(*c))
            {
                return bad(format!("label {c} at position {i} is outside 0..{classes}"));
            }
        }
        Target::Values(v) => {
            let expected = [n, model.spec().classes];
            if v.dims() != expected || v.dtype() != DType::F32 {
                return bad(format!(
                    "targets must be f32 of shape [{n}, {}], got {} {}",
                    expected[1],
                    v.dtype(),
                    v.shape()
                ));
            }
        }
    }
    Ok(())
}
