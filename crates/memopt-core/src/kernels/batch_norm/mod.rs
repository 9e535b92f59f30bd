//! Batch normalisation over `x` of shape `[B, C, *spatial]` (BatchNorm1d: `[B, C]` or `[B, C, L]`;
//! BatchNorm2d: `[B, C, H, W]`), with PyTorch's semantics: statistics per channel over every
//! dimension but C, biased variance to normalise, unbiased variance for the running estimate.
//!
//! Memory layout: `x` is `B * C` contiguous planes of `S = prod(spatial)` elements; plane `p`
//! belongs to channel `p % C`. Statistics are per-plane f64 sums computed in parallel into tracked
//! workspace and folded per channel one sample after the other (`sums.rs`), so they are accurate,
//! do not depend on the number of threads, and can be computed over parts of the batch in turn
//! with the same result: the chunked entry points (`chunked.rs`) let a checkpointed segment that
//! runs its time steps in chunks normalise exactly as over the whole batch. Elementwise passes
//! run in parallel over planes.

mod backward;
mod chunked;
mod chunked_backward;
#[cfg(test)]
mod chunked_tests;
mod cuda;
mod sums;
#[cfg(test)]
mod tests;

pub use backward::{BatchNormBackward, BatchNormGrads, batch_norm_backward};
pub use chunked::{
    BatchNormStatSums, BatchNormStats, batch_norm_normalize, batch_norm_stat_sums, batch_norm_stats_finish,
};
pub use chunked_backward::{
    BatchNormBackwardInput, BatchNormGradSums, batch_norm_backward_input, batch_norm_grad_sums,
    batch_norm_param_grads,
};

use super::accum::F64Workspace;
use crate::backend::{Compute, Init, compute};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;
use sums::Fold;

/// Running statistics of a BatchNorm layer, `[C]` each: updated in place by
/// [`batch_norm_train`], read by [`batch_norm_eval`].
pub struct RunningStats<'a> {
    /// Running mean.
    pub mean: &'a Tensor,
    /// Running (unbiased) variance.
    pub var: &'a Tensor,
}

/// Result of [`batch_norm_train`]: the output and what backward needs.
pub struct BatchNormOutput {
    /// Normalised output, shape of `x`.
    pub y: Tensor,
    /// Batch mean per channel, `[C]`.
    pub save_mean: Tensor,
    /// `1 / sqrt(biased batch variance + eps)` per channel, `[C]`.
    pub save_invstd: Tensor,
}

/// Elements per parallel task (at least one plane) in per-plane passes.
const TASK_ELEMS: usize = 1 << 12;

/// The `[B, C, S]` view of an input.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub(super) b: usize,
    pub(super) c: usize,
    /// Elements per plane (product of the spatial dimensions; 1 for `[B, C]`).
    pub(super) s: usize,
}

impl Layout {
    pub(super) fn of(op: &'static str, x: &Tensor) -> Result<Layout> {
        match x.dims() {
            [b, c, spatial @ ..] => Ok(Layout {
                b: *b,
                c: *c,
                s: spatial.iter().product(),
            }),
            _ => Err(CoreError::shape(
                op,
                "x of shape [B, C] or [B, C, *spatial]",
                x.shape(),
            )),
        }
    }

    pub(super) fn planes(self) -> usize {
        self.b * self.c
    }

    /// Values per channel.
    pub(super) fn per_channel(self) -> usize {
        self.b * self.s
    }

    /// Planes per parallel task.
    pub(super) fn min_planes(self) -> usize {
        (TASK_ELEMS / self.s.max(1)).max(1)
    }

    /// Runs `f(p, out_plane)` for every plane `p` of `out` in parallel.
    pub(super) fn for_planes(self, out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Sync) {
        if self.s == 0 {
            return;
        }
        out.par_chunks_mut(self.s)
            .enumerate()
            .with_min_len(self.min_planes())
            .for_each(|(p, o)| f(p, o));
    }

    /// Elements of plane `p` within a `[B, C, S]` buffer.
    pub(super) fn plane(self, p: usize) -> std::ops::Range<usize> {
        p * self.s..(p + 1) * self.s
    }
}

/// Checks an optional per-channel tensor: f32, `[C]`, on `x`'s device.
pub(super) fn check_channel(
    op: &'static str,
    name: &str,
    t: Option<&Tensor>,
    x: &Tensor,
    c: usize,
) -> Result<()> {
    let Some(t) = t else { return Ok(()) };
    x.expect_same_device(op, t)?;
    t.expect_dtype(op, crate::DType::F32)?;
    if t.dims() != [c] {
        return Err(CoreError::shape(
            op,
            format!("{name} of shape [{c}] (one value per channel of x {})", x.shape()),
            t.shape(),
        ));
    }
    Ok(())
}

fn check_eps(op: &'static str, eps: f32) -> Result<()> {
    if eps >= 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(CoreError::invalid(
            op,
            format!("eps must be finite and >= 0 (PyTorch's default is 1e-5), got {eps}"),
        ))
    }
}

fn check_momentum(op: &'static str, momentum: f32) -> Result<()> {
    if (0.0..=1.0).contains(&momentum) {
        Ok(())
    } else {
        Err(CoreError::invalid(
            op,
            format!("momentum must be in [0, 1] (PyTorch's default is 0.1), got {momentum}"),
        ))
    }
}

/// Checks running statistics updated in place: `[C]` f32 on `like`'s device, and sharing
/// storage neither with each other nor with any of `reads` (the tensors the op reads).
fn check_running(
    op: &'static str,
    r: &RunningStats<'_>,
    like: &Tensor,
    c: usize,
    reads: &[(&str, Option<&Tensor>)],
) -> Result<()> {
    check_channel(op, "running mean", Some(r.mean), like, c)?;
    check_channel(op, "running var", Some(r.var), like, c)?;
    let shared = |name: &str| {
        CoreError::invalid(
            op,
            format!(
                "the running statistics share storage with {name}; they are updated in place and must be separate buffers"
            ),
        )
    };
    if r.mean.same_storage(r.var) {
        return Err(shared("the running var"));
    }
    for &(name, t) in reads {
        if let Some(t) = t
            && (r.mean.same_storage(t) || r.var.same_storage(t))
        {
            return Err(shared(name));
        }
    }
    Ok(())
}

/// Training statistics need at least two values per channel (`m` of them, from an input
/// described by `shape`).
fn check_values_per_channel(op: &'static str, m: usize, shape: &str) -> Result<()> {
    if m < 2 {
        return Err(CoreError::invalid(
            op,
            format!(
                "expected more than 1 value per channel when training, got input of shape {shape} ({m} per channel); use batch_norm_eval or a larger batch"
            ),
        ));
    }
    Ok(())
}

/// The value of an optional per-channel slice at `c`, or `default` when absent.
#[inline]
pub(super) fn at(v: Option<&[f32]>, c: usize, default: f32) -> f32 {
    v.map_or(default, |v| v[c])
}

/// Arguments of [`batch_norm_train`].
pub struct BatchNormTrain<'a> {
    /// Input `[B, C, *spatial]`.
    pub x: &'a Tensor,
    /// Scale `[C]` (`None` means 1).
    pub weight: Option<&'a Tensor>,
    /// Shift `[C]` (`None` means 0).
    pub bias: Option<&'a Tensor>,
    /// Running statistics to update in place; `None` switches the update off (used during
    /// recomputation).
    pub running: Option<RunningStats<'a>>,
    /// Weight of the batch statistics in the running update, in `[0, 1]` (PyTorch: 0.1).
    pub momentum: f32,
    /// Added to the variance before the square root, finite and `>= 0` (PyTorch: 1e-5).
    pub eps: f32,
}

/// Training-mode batch normalisation (PyTorch semantics): the batch mean and biased variance
/// normalise, `y = (x - mean) / sqrt(var + eps) * weight + bias` (weight 1 and bias 0 when
/// absent). When `running` is given, `running_mean = (1 - momentum) * running_mean + momentum *
/// mean` and `running_var = (1 - momentum) * running_var + momentum * unbiased_var`, in place.
/// The statistics are shifted one-pass sums folded in sample order (see `sums.rs`), so that
/// [`batch_norm_stat_sums`] over consecutive parts of the batch gives the same bits.
/// Outputs are Activation; tracked workspace of `8 * (2*B*C + 3*C)` bytes lives during the call.
pub fn batch_norm_train(args: BatchNormTrain<'_>) -> Result<BatchNormOutput> {
    train(args, true)
}

/// [`batch_norm_train`] for a backward only: the same statistics (bit for bit) and running
/// update, without the normalised output, which is returned as an unmaterialised stand-in
/// ([`Tensor::unmaterialised`], shape of `x`): no `y` buffer is allocated and the elementwise
/// pass is skipped. Used when nobody reads `y` (a recomputed segment's output, whose gradient is
/// all its backward needs; [`batch_norm_backward`] reads `x`, not `y`).
pub fn batch_norm_train_for_backward(args: BatchNormTrain<'_>) -> Result<BatchNormOutput> {
    train(args, false)
}

fn train(args: BatchNormTrain<'_>, with_y: bool) -> Result<BatchNormOutput> {
    let BatchNormTrain {
        x,
        weight,
        bias,
        running,
        momentum,
        eps,
    } = args;
    const OP: &str = "batch_norm_train";
    let l = Layout::of(OP, x)?;
    check_channel(OP, "weight", weight, x, l.c)?;
    check_channel(OP, "bias", bias, x, l.c)?;
    check_eps(OP, eps)?;
    check_momentum(OP, momentum)?;
    if let Some(r) = &running {
        check_running(
            OP,
            r,
            x,
            l.c,
            &[("x", Some(x)), ("the weight", weight), ("the bias", bias)],
        )?;
    }
    let m = l.per_channel();
    check_values_per_channel(OP, m, &x.shape().to_string())?;
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let br = bias.map(|b| b.read::<f32>(OP)).transpose()?;
    let dev = x.device();
    let mut y = with_y
        .then(|| KernelBuffer::<f32>::new(OP, dev, x.elem_count(), MemoryKind::Activation, Init::Overwritten))
        .transpose()?;
    let mut save_mean = KernelBuffer::<f32>::new(OP, dev, l.c, MemoryKind::Activation, Init::Overwritten)?;
    let mut save_invstd = KernelBuffer::<f32>::new(OP, dev, l.c, MemoryKind::Activation, Init::Overwritten)?;
    // Workspace: per-plane (sum(x - shift), sum((x - shift)^2)) pairs, then the shift and the
    // two sums per channel.
    let mut ws = F64Workspace::new(OP, dev, 2 * l.planes() + 3 * l.c, Init::Overwritten)?;
    // The running statistics are written in place (checked above not to share storage with
    // anything read here).
    let mut run_w = match &running {
        Some(r) => Some((r.mean.write::<f32>(OP)?, r.var.write::<f32>(OP)?)),
        None => None,
    };
    compute(dev, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let running = match run_w.as_mut() {
                Some((mw, vw)) => Some((mw.cuda_ptr()?, vw.cuda_ptr()?)),
                None => None,
            };
            let ptrs = cuda::TrainPtrs {
                x: xr.cuda_ptr()?,
                weight: wr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                bias: br.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                y: y.as_mut().map(|y| y.cuda_ptr()).transpose()?,
                save_mean: save_mean.cuda_ptr()?,
                save_invstd: save_invstd.cuda_ptr()?,
                running,
                ws: ws.cuda_ptr()?,
            };
            return cuda::train(gpu, l, (momentum, eps), ptrs);
        }
        let (xs, ys, ms, is, w) = (
            xr.host()?,
            y.as_mut().map(|y| y.host_mut()).transpose()?,
            save_mean.host_mut()?,
            save_invstd.host_mut()?,
            ws.host_mut()?,
        );
        let (part, per_channel) = w.split_at_mut(2 * l.planes());
        let (shift, s12) = per_channel.split_at_mut(l.c);
        let (s1, s2) = s12.split_at_mut(l.c);
        sums::first_sample_shift(l, xs, shift);
        sums::stat_plane_sums(l, xs, shift, part);
        s1.fill(0.0);
        s2.fill(0.0);
        sums::fold_pairs(l, part, s1, s2, Fold::Ascending);
        let mut run = match run_w.as_mut() {
            Some((mw, vw)) => Some((mw.host_mut()?, vw.host_mut()?)),
            None => None,
        };
        for c in 0..l.c {
            let (mean, var) = sums::mean_var(shift[c], s1[c], s2[c], m as f64);
            ms[c] = mean as f32;
            is[c] = sums::invstd(var, eps);
            if let Some((rm, rv)) = run.as_mut() {
                sums::running_update(&mut rm[c], &mut rv[c], mean, var, momentum, m as f64);
            }
        }
        let (ws_, bs_) = (
            wr.as_ref().map(|r| r.host()).transpose()?,
            br.as_ref().map(|r| r.host()).transpose()?,
        );
        if let Some(ys) = ys {
            sums::normalize(l, xs, ys, (ms, is), (ws_, bs_));
        }
        Ok(())
    })?;
    drop(run_w);
    drop(ws);
    let y = match y {
        Some(y) => y.into_tensor(x.shape().clone())?,
        None => Tensor::unmaterialised(x.shape().clone(), crate::DType::F32, dev)?,
    };
    Ok(BatchNormOutput {
        y,
        save_mean: save_mean.into_tensor([l.c])?,
        save_invstd: save_invstd.into_tensor([l.c])?,
    })
}

/// Evaluation-mode batch normalisation: `y = (x - running.mean) / sqrt(running.var + eps) *
/// weight + bias` (weight 1 and bias 0 when absent); `running` is only read. Output kind
/// Activation; no workspace.
pub fn batch_norm_eval(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    running: RunningStats<'_>,
    eps: f32,
) -> Result<Tensor> {
    const OP: &str = "batch_norm_eval";
    let RunningStats {
        mean: running_mean,
        var: running_var,
    } = running;
    let l = Layout::of(OP, x)?;
    check_channel(OP, "weight", weight, x, l.c)?;
    check_channel(OP, "bias", bias, x, l.c)?;
    check_channel(OP, "running mean", Some(running_mean), x, l.c)?;
    check_channel(OP, "running var", Some(running_var), x, l.c)?;
    check_eps(OP, eps)?;
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let br = bias.map(|b| b.read::<f32>(OP)).transpose()?;
    let (mr, vr) = (running_mean.read::<f32>(OP)?, running_var.read::<f32>(OP)?);
    let mut y = KernelBuffer::<f32>::new(
        OP,
        x.device(),
        x.elem_count(),
        MemoryKind::Activation,
        Init::Overwritten,
    )?;
    compute(x.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let ptrs = cuda::EvalPtrs {
                x: xr.cuda_ptr()?,
                weight: wr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                bias: br.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                running_mean: mr.cuda_ptr()?,
                running_var: vr.cuda_ptr()?,
                y: y.cuda_ptr()?,
            };
            return cuda::eval(gpu, l, eps, ptrs);
        }
        let (xs, ys, rm, rv) = (xr.host()?, y.host_mut()?, mr.host()?, vr.host()?);
        let (ws_, bs_) = (
            wr.as_ref().map(|r| r.host()).transpose()?,
            br.as_ref().map(|r| r.host()).transpose()?,
        );
        l.for_planes(ys, |p, yp| {
            let c = p % l.c;
            let invstd = 1.0 / (rv[c] as f64 + eps as f64).sqrt();
            let scale = (invstd * at(ws_, c, 1.0) as f64) as f32;
            let (mu, shift) = (rm[c], at(bs_, c, 0.0));
            for (y, &x) in yp.iter_mut().zip(&xs[l.plane(p)]) {
                *y = (x - mu) * scale + shift;
            }
        });
        Ok(())
    })?;
    y.into_tensor(x.shape().clone())
}
