//! Batch normalisation over `x` of shape `[B, C, *spatial]` (BatchNorm1d: `[B, C]` or `[B, C, L]`;
//! BatchNorm2d: `[B, C, H, W]`), with PyTorch's semantics: statistics per channel over every
//! dimension but C, biased variance to normalise, unbiased variance for the running estimate.
//!
//! Memory layout: `x` is `B * C` contiguous planes of `S = prod(spatial)` elements; plane `p`
//! belongs to channel `p % C`. Statistics are per-plane f64 sums computed in parallel into tracked
//! workspace and added per channel in batch order, so they are accurate and do not depend on the
//! number of threads. Elementwise passes run in parallel over planes.

mod backward;
mod cuda;
#[cfg(test)]
mod tests;

pub use backward::{BatchNormBackward, BatchNormGrads, batch_norm_backward};

use super::accum::{F64Workspace, fill_parallel, sum_f64, sum_map_f64};
use crate::backend::{Compute, Init, compute};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

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

    /// `out[c] = sum over b of part[b * C + c]` after `part[p] = plane_sum(p)` in parallel.
    pub(super) fn channel_sums(
        self,
        part: &mut [f64],
        out: &mut [f64],
        plane_sum: impl Fn(usize) -> f64 + Sync,
    ) {
        fill_parallel(part, self.min_planes(), plane_sum);
        out.fill(0.0);
        for row in part.chunks_exact(self.c.max(1)) {
            for (o, &v) in out.iter_mut().zip(row) {
                *o += v;
            }
        }
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
/// Outputs are Activation; tracked workspace of `8 * (B*C + 2*C)` bytes lives during the call.
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
    if !(0.0..=1.0).contains(&momentum) {
        return Err(CoreError::invalid(
            OP,
            format!("momentum must be in [0, 1] (PyTorch's default is 0.1), got {momentum}"),
        ));
    }
    if let Some(r) = &running {
        check_channel(OP, "running mean", Some(r.mean), x, l.c)?;
        check_channel(OP, "running var", Some(r.var), x, l.c)?;
        let inputs = [
            ("the running var", Some(r.var)),
            ("x", Some(x)),
            ("the weight", weight),
            ("the bias", bias),
        ];
        for (name, t) in inputs {
            if let Some(t) = t
                && (r.mean.same_storage(t) || (name != "the running var" && r.var.same_storage(t)))
            {
                return Err(CoreError::invalid(
                    OP,
                    format!(
                        "the running statistics share storage with {name}; they are updated in place and must be separate buffers"
                    ),
                ));
            }
        }
    }
    let m = l.per_channel();
    if m < 2 {
        return Err(CoreError::invalid(
            OP,
            format!(
                "expected more than 1 value per channel when training, got input of shape {} ({m} per channel); use batch_norm_eval or a larger batch",
                x.shape()
            ),
        ));
    }
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let br = bias.map(|b| b.read::<f32>(OP)).transpose()?;
    let dev = x.device();
    let mut y = with_y
        .then(|| KernelBuffer::<f32>::new(OP, dev, x.elem_count(), MemoryKind::Activation, Init::Overwritten))
        .transpose()?;
    let mut save_mean = KernelBuffer::<f32>::new(OP, dev, l.c, MemoryKind::Activation, Init::Overwritten)?;
    let mut save_invstd = KernelBuffer::<f32>::new(OP, dev, l.c, MemoryKind::Activation, Init::Overwritten)?;
    // Workspace: per-plane partial sums, then the f64 mean and biased variance per channel.
    let mut ws = F64Workspace::new(OP, dev, l.planes() + 2 * l.c, Init::Overwritten)?;
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
        let (part, stats) = w.split_at_mut(l.planes());
        let (mean, var) = stats.split_at_mut(l.c);
        l.channel_sums(part, mean, |p| sum_f64(&xs[l.plane(p)]));
        mean.iter_mut().for_each(|v| *v /= m as f64);
        let mean: &[f64] = mean;
        l.channel_sums(part, var, |p| {
            let mu = mean[p % l.c];
            sum_map_f64(&xs[l.plane(p)], |v| {
                let d = v as f64 - mu;
                d * d
            })
        });
        var.iter_mut().for_each(|v| *v /= m as f64);
        for c in 0..l.c {
            ms[c] = mean[c] as f32;
            is[c] = (1.0 / (var[c] + eps as f64).sqrt()) as f32;
        }
        let (ws_, bs_) = (
            wr.as_ref().map(|r| r.host()).transpose()?,
            br.as_ref().map(|r| r.host()).transpose()?,
        );
        let (ms, is): (&[f32], &[f32]) = (ms, is);
        if let Some(ys) = ys {
            l.for_planes(ys, |p, yp| {
                let c = p % l.c;
                let (mu, scale, shift) = (ms[c], is[c] * at(ws_, c, 1.0), at(bs_, c, 0.0));
                for (y, &x) in yp.iter_mut().zip(&xs[l.plane(p)]) {
                    *y = (x - mu) * scale + shift;
                }
            });
        }
        if let Some((mw, vw)) = run_w.as_mut() {
            let (rm, rv) = (mw.host_mut()?, vw.host_mut()?);
            let (mo, unbias) = (momentum as f64, m as f64 / (m - 1) as f64);
            for c in 0..l.c {
                rm[c] = ((1.0 - mo) * rm[c] as f64 + mo * mean[c]) as f32;
                rv[c] = ((1.0 - mo) * rv[c] as f64 + mo * var[c] * unbias) as f32;
            }
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
