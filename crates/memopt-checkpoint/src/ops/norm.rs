//! Batch normalisation.

use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedTensor, Var};
use crate::context::Cx;
use crate::{CheckpointError, Forward, Result};
use memopt_core::Tensor;
use memopt_core::kernels::{self, GradNeeds, RunningStats};

/// Batch normalisation of `x [B, C, ...]`. In training mode it normalises with batch statistics
/// and updates `running` (mean, var) in place — except while recomputing, so the update happens
/// once per step whatever the memory policy. In eval mode it uses `running` and cannot be
/// differentiated. Inside a segment that runs its time steps in chunks, the statistics are
/// still the whole batch's, bit-identical (see `ops/norm_chunk.rs`). When its output is read by
/// no one ([`Cx::take_output_unread`]) and it records its backward, which keeps `x` and the
/// statistics but not the output, the output is an unmaterialised stand-in: only the statistics
/// are computed.
pub fn batch_norm<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    weight: Option<&Var>,
    bias: Option<&Var>,
    running: (&Tensor, &Tensor),
    momentum: f32,
    eps: f32,
) -> Forward<Var> {
    let unread = cx.take_output_unread();
    let slots = [Some(x), weight, bias];
    let needs_grad = cx.slots_need_grad(&slots);
    let xt = x.tensor()?;
    let (wt, bt) = (
        weight.map(Var::tensor).transpose()?,
        bias.map(Var::tensor).transpose()?,
    );
    if !cx.is_training() {
        if needs_grad {
            return Err(CheckpointError::in_module(
                "BatchNorm",
                "backward through BatchNorm in eval mode is not supported; train in training mode \
                 or run eval without recording",
            )
            .into());
        }
        let y = kernels::batch_norm_eval(
            &xt,
            wt.as_deref(),
            bt.as_deref(),
            kernels::RunningStats {
                mean: running.0,
                var: running.1,
            },
            eps,
        )?;
        return Ok(Var::constant(y));
    }
    let tensors = (&*xt, wt.as_deref(), bt.as_deref());
    if let Some(y) =
        super::norm_chunk::batch_norm_in_chunk(cx, slots, tensors, running, (momentum, eps), unread)?
    {
        return Ok(y);
    }
    let stats = (!cx.is_recomputing()).then_some(RunningStats {
        mean: running.0,
        var: running.1,
    });
    let args = kernels::BatchNormTrain {
        x: &xt,
        weight: wt.as_deref(),
        bias: bt.as_deref(),
        running: stats,
        momentum,
        eps,
    };
    let out = if unread && needs_grad {
        kernels::batch_norm_train_for_backward(args)?
    } else {
        kernels::batch_norm_train(args)?
    };
    if !needs_grad {
        return Ok(Var::constant(out.y));
    }
    let op = BatchNormBackward {
        x: cx.save(&xt),
        weight: wt.as_deref().map(|w| cx.save(w)),
        mean: cx.save(&out.save_mean),
        invstd: cx.save(&out.save_invstd),
    };
    Ok(cx.record(Record::new(op, slots), out.y))
}

struct BatchNormBackward {
    x: SavedTensor,
    weight: Option<SavedTensor>,
    mean: SavedTensor,
    invstd: SavedTensor,
}

impl Backward<3> for BatchNormBackward {
    fn name(&self) -> &'static str {
        "batch_norm"
    }

    fn backward(
        self,
        _params: &mut Gradients,
        mut g: BackwardGrads<[InputSlot; 3]>,
    ) -> Result<[Option<Tensor>; 3]> {
        let grad = g.take_output_or_zeros(0, self.x.tensor())?;
        let [x, weight, bias] = g.inputs;
        let needs = GradNeeds {
            input: x.needs_grad,
            weight: weight.needs_grad,
            bias: bias.needs_grad,
        };
        let r = kernels::batch_norm_backward(kernels::BatchNormBackward {
            grad_y: grad.into(),
            x: self.x.tensor(),
            weight: self.weight.as_ref().map(SavedTensor::tensor),
            save_mean: self.mean.tensor(),
            save_invstd: self.invstd.tensor(),
            needs,
        })?;
        Ok([r.x, r.weight, r.bias])
    }
}
