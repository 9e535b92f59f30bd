//! Training BatchNorm inside a segment that runs its time steps in chunks: the input is one
//! chunk of the batch, the statistics are still the whole batch's, bit-identical to an
//! unchunked step. The segment (`policy/chunk_passes.rs`) runs statistics passes in which the
//! BatchNorm adds its chunk's sums and stops the chunk, then normalises each chunk with the
//! statistics it computed; in backward, passes sum the output gradient over all chunks before
//! any chunk's input gradient. The op finds what applies by its module path (the current
//! scope).

use crate::autograd::{BackwardGrads, BackwardOp, Record, SavedTensor, Var, fixed_slots};
use crate::context::Cx;
use crate::{CheckpointError, Forward, Result, Stop};
use memopt_core::kernels::{self, BatchNormStats};
use memopt_core::memory::current_scope;
use memopt_core::{DType, ModulePath, Tensor};

/// The training BatchNorm of the current scope on a time chunk, or `None` when it runs on the
/// whole batch (outside chunked segments): normalised with the given statistics, or, in a
/// statistics pass, its sums added and the chunk stopped (the error the segment catches).
/// `tensors` are the values of `slots` (input, weight, bias) as tensors (an input of packed
/// spikes unpacked once by the caller). `unread`: nobody reads the output
/// ([`Cx::take_output_unread`]), so a recorded chunk is not normalised (its backward keeps `x`
/// and the statistics, not the output).
pub(super) fn batch_norm_in_chunk<'m>(
    cx: &mut Cx<'m>,
    slots: [Option<&Var>; 3],
    tensors: BatchNormTensors<'_>,
    running: (&Tensor, &Tensor),
    consts: (f32, f32),
    unread: bool,
) -> Forward<Option<Var>> {
    let path = current_scope().module_path().clone();
    if let Some(stats) = cx.batch_stats_mut().normalize_with(&path, per_channel(tensors.0)) {
        return Ok(normalize_chunk(cx, path, slots, tensors, stats, unread).map(Some)?);
    }
    if cx.batch_stats().in_stats_pass() {
        let running = (!cx.is_recomputing()).then_some(running);
        cx.batch_stats_mut()
            .add_stat_sums(&path, tensors.0, running, consts)?;
        return Err(Stop::StatisticsGathered);
    }
    if cx.in_time_chunk() {
        return Err(CheckpointError::Module {
            path: path.to_string(),
            module: "BatchNorm".into(),
            message: "runs on a time chunk without the statistics of the whole batch (the chunked segment around it \
                      did not compute them)"
                .into(),
        }
        .into());
    }
    Ok(None)
}

/// A BatchNorm's input, weight and bias as tensors.
pub(super) type BatchNormTensors<'a> = (&'a Tensor, Option<&'a Tensor>, Option<&'a Tensor>);

/// Values per channel of a `[B, C, ...]` input.
fn per_channel(x: &Tensor) -> usize {
    match x.dims() {
        [b, _, spatial @ ..] => spatial.iter().product::<usize>().saturating_mul(*b),
        _ => 0,
    }
}

/// Normalises one chunk with the whole batch's `stats` and records a backward that uses the
/// whole batch's gradient sums. The BatchNorm whose gradient sums are being computed is
/// recorded even when nothing before it needs a gradient. When the output is `unread` and the
/// backward is recorded, nothing is normalised: the output is an unmaterialised stand-in.
fn normalize_chunk<'m>(
    cx: &mut Cx<'m>,
    path: ModulePath,
    slots: [Option<&Var>; 3],
    (x, weight, bias): BatchNormTensors<'_>,
    stats: BatchNormStats,
    unread: bool,
) -> Result<Var> {
    let target = cx.is_recording() && cx.batch_stats().is_grad_target(&path);
    let recorded = target || cx.slots_need_grad(&slots);
    let y = if unread && recorded && x.dtype() == DType::F32 {
        Tensor::unmaterialised(x.shape().clone(), DType::F32, x.device())?
    } else {
        kernels::batch_norm_normalize(x, weight, bias, &stats)?
    };
    if !recorded {
        return Ok(Var::constant(y));
    }
    let op = ChunkBatchNormBackward {
        path,
        x: cx.save(x),
        weight: weight.map(|w| cx.save(w)),
        stats,
    };
    let ids = slots.iter().map(|v| v.and_then(Var::id)).collect();
    let record = Record::erased(Box::new(op), ids);
    Ok(cx.record(if target { record.always() } else { record }, y))
}

/// Backward of a BatchNorm on one time chunk: in the BatchNorm's gradient-sums pass, adds the
/// chunk to the sums (the tape stops after it); otherwise the input gradient from the whole
/// batch's sums, and the weight and bias gradients once per step. It reads the chunked
/// segment's batch statistics, so it runs in the whole context rather than as a typed op.
struct ChunkBatchNormBackward {
    path: ModulePath,
    x: SavedTensor,
    weight: Option<SavedTensor>,
    /// The whole batch's statistics (kept by the chunked segment, which saved them).
    stats: BatchNormStats,
}

impl<'m> BackwardOp<'m, Cx<'m>> for ChunkBatchNormBackward {
    fn name(&self) -> &'static str {
        "batch_norm_chunk"
    }

    fn backward(self: Box<Self>, cx: &mut Cx<'m>, grads: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let mut g = fixed_slots::<3>(self.name(), grads)?;
        let grad = g.take_output_or_zeros(0, self.x.tensor())?;
        let [x, weight, bias] = g.inputs;
        if cx.batch_stats().is_grad_target(&self.path) {
            cx.batch_stats_mut()
                .add_grad_sums(&grad, self.x.tensor(), &self.stats.mean)?;
            return Ok(vec![None, None, None]);
        }
        let want_params = (weight.needs_grad || bias.needs_grad) && !cx.batch_stats().in_grad_pass();
        let (sums, params) = cx.batch_stats_mut().grad_sums(&self.path, want_params)?;
        let p = if params {
            kernels::batch_norm_param_grads(sums, &self.stats.invstd, weight.needs_grad, bias.needs_grad)?
        } else {
            kernels::BatchNormGrads {
                x: None,
                weight: None,
                bias: None,
            }
        };
        let gx = if x.needs_grad {
            Some(kernels::batch_norm_backward_input(
                kernels::BatchNormBackwardInput {
                    grad_y: grad.into(),
                    x: self.x.tensor(),
                    weight: self.weight.as_ref().map(SavedTensor::tensor),
                    stats: &self.stats,
                    sums,
                },
            )?)
        } else {
            None
        };
        Ok(vec![gx, p.weight, p.bias])
    }
}
