//! Batch normalisation.

use crate::autograd::{BackwardGrads, BackwardOp, SavedTensor, Var};
use crate::context::Cx;
use crate::{CheckpointError, Result};
use memopt_core::Tensor;
use memopt_core::kernels::{self, GradNeeds, RunningStats};
use memopt_core::memory::current_scope;

/// Batch normalisation of `x [B, C, ...]`. In training mode it normalises with batch statistics
/// and updates `running` (mean, var) in place — except while recomputing, so the update happens
/// once per step whatever the memory policy. In eval mode it uses `running` and cannot be
/// differentiated.
pub fn batch_norm<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    weight: Option<&Var>,
    bias: Option<&Var>,
    running: (&Tensor, &Tensor),
    momentum: f32,
    eps: f32,
) -> Result<Var> {
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let needs_grad = cx.needs_grad(&inputs);
    if !cx.is_training() {
        if needs_grad {
            return Err(CheckpointError::Module {
                path: current_scope().path().to_string(),
                module: "BatchNorm".into(),
                message: "backward through BatchNorm in eval mode is not supported; train in training mode \
                          or run eval without recording"
                    .into(),
            });
        }
        let y = kernels::batch_norm_eval(
            x.tensor(),
            weight.map(Var::tensor),
            bias.map(Var::tensor),
            kernels::RunningStats {
                mean: running.0,
                var: running.1,
            },
            eps,
        )?;
        return Ok(Var::constant(y));
    }
    let stats = (!cx.is_recomputing()).then_some(RunningStats {
        mean: running.0,
        var: running.1,
    });
    let out = kernels::batch_norm_train(kernels::BatchNormTrain {
        x: x.tensor(),
        weight: weight.map(Var::tensor),
        bias: bias.map(Var::tensor),
        running: stats,
        momentum,
        eps,
    })?;
    if !needs_grad {
        return Ok(Var::constant(out.y));
    }
    let op = BatchNormBackward {
        x: cx.save(x.tensor()),
        weight: weight.map(|w| cx.save(w.tensor())),
        has_bias: bias.is_some(),
        mean: cx.save(&out.save_mean),
        invstd: cx.save(&out.save_invstd),
    };
    Ok(cx.record1(op, &inputs, out.y))
}

struct BatchNormBackward {
    x: SavedTensor,
    weight: Option<SavedTensor>,
    has_bias: bool,
    mean: SavedTensor,
    invstd: SavedTensor,
}

impl<'m> BackwardOp<'m> for BatchNormBackward {
    fn name(&self) -> &'static str {
        "batch_norm"
    }

    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, mut g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let grad = g.take_output_or_zeros(0, self.x.tensor())?;
        let has_w = self.weight.is_some();
        let needs = GradNeeds {
            input: g.input_needs[0],
            weight: has_w && g.input_needs[1],
            bias: self.has_bias && g.input_needs[usize::from(has_w) + 1],
        };
        let r = kernels::batch_norm_backward(kernels::BatchNormBackward {
            grad_y: grad.into(),
            x: self.x.tensor(),
            weight: self.weight.as_ref().map(SavedTensor::tensor),
            save_mean: self.mean.tensor(),
            save_invstd: self.invstd.tensor(),
            needs,
        })?;
        let mut out = vec![r.x];
        if has_w {
            out.push(r.weight);
        }
        if self.has_bias {
            out.push(r.bias);
        }
        Ok(out)
    }
}
