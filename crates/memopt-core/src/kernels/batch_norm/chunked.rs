//! Training-mode BatchNorm over a batch that is available one part at a time (the time chunks of
//! a checkpointed segment): statistics summed part by part, then normalisation with given
//! statistics; in backward (`chunked_backward.rs`), gradient sums summed part by part, then the
//! input gradient of each part. Every sum is folded exactly as [`super::batch_norm_train`] and
//! [`super::batch_norm_backward`] fold the whole batch (`sums.rs`): parts in batch order for the
//! statistics, in reverse batch order for the gradient sums. So over the same batch the results
//! are bit-identical to the whole-batch kernels.
//!
//! The running sums are f64 values kept in a tracked `I64` tensor of the same size (the
//! tracker has no f64 dtype), kind [`MemoryKind::Workspace`].

use super::sums::{self, Fold};
use super::{
    Layout, RunningStats, check_channel, check_eps, check_momentum, check_running, check_values_per_channel,
    cuda,
};
use crate::backend::{Compute, Init, compute};
use crate::kernels::accum::F64Workspace;
use crate::memory::MemoryKind;
use crate::{CoreError, DType, Device, KernelBuffer, Result, Tensor};

/// The statistics sums of a BatchNorm input over the parts of a batch added so far (by
/// [`batch_norm_stat_sums`]): per channel, the shift (the first value of the first sample),
/// `sum(x - shift)` and `sum((x - shift)^2)`, in f64.
#[derive(Debug)]
pub struct BatchNormStatSums {
    /// `[3, C]` f64 values as i64 bits: shifts, first sums, second sums.
    sums: Tensor,
    channels: usize,
    count: usize,
}

impl BatchNormStatSums {
    /// Channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Values per channel added so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Device of the sums.
    pub fn device(&self) -> Device {
        self.sums.device()
    }
}

/// The batch statistics of a BatchNorm, as [`super::batch_norm_train`] saves them.
#[derive(Debug, Clone)]
pub struct BatchNormStats {
    /// Batch mean per channel, `[C]` f32.
    pub mean: Tensor,
    /// `1 / sqrt(biased batch variance + eps)` per channel, `[C]` f32.
    pub invstd: Tensor,
    /// Values per channel the statistics are over.
    pub count: usize,
}

/// `[rows, C]` zeroed f64 sums (as i64 bits) for op `op`, kind workspace.
pub(super) fn zeroed_sums(op: &'static str, device: Device, rows: usize, c: usize) -> Result<Tensor> {
    KernelBuffer::<i64>::new(op, device, rows * c, MemoryKind::Workspace, Init::Zeroed)?
        .into_tensor([rows, c])
}

/// Checks that `sums` (of `channels` channels, on `sums_t`'s device) fit `x`, and returns the
/// values per channel once `x` is added to `count`.
pub(super) fn check_part(
    op: &'static str,
    x: &Tensor,
    l: Layout,
    sums_t: &Tensor,
    channels: usize,
    count: usize,
) -> Result<usize> {
    x.expect_same_device(op, sums_t)?;
    if channels != l.c {
        return Err(CoreError::shape(
            op,
            format!("x with the sums' {channels} channels, [B, {channels}, *spatial]"),
            x.shape(),
        ));
    }
    count.checked_add(l.per_channel()).ok_or_else(|| {
        CoreError::invalid(
            op,
            format!(
                "values per channel overflow: {count} + {} of x {}",
                l.per_channel(),
                x.shape()
            ),
        )
    })
}

/// Adds the part `x` (`[B, C, *spatial]`, f32) of a batch to the statistics sums `previous`
/// (`None` for the batch's first part, whose first sample gives the shifts) and returns them.
/// Parts must come in batch order. Allocates the `[3, C]` sums for the first part (kind
/// workspace), and tracked workspace of `16 * B * C` bytes during the call.
pub fn batch_norm_stat_sums(x: &Tensor, previous: Option<BatchNormStatSums>) -> Result<BatchNormStatSums> {
    const OP: &str = "batch_norm_stat_sums";
    let l = Layout::of(OP, x)?;
    x.expect_dtype(OP, DType::F32)?;
    let count = match &previous {
        Some(p) => check_part(OP, x, l, &p.sums, p.channels, p.count)?,
        None if l.b == 0 || l.s == 0 => {
            return Err(CoreError::invalid(
                OP,
                format!(
                    "the first part of a batch needs a sample with values (its first values shift the sums), got x {}",
                    x.shape()
                ),
            ));
        }
        None => l.per_channel(),
    };
    let xr = x.read::<f32>(OP)?;
    let dev = x.device();
    let (sums_t, fresh) = match previous {
        Some(p) => (p.sums, false),
        None => (zeroed_sums(OP, dev, 3, l.c)?, true),
    };
    let mut ws = F64Workspace::new(OP, dev, 2 * l.planes(), Init::Overwritten)?;
    {
        let mut sw = sums_t.write::<i64>(OP)?;
        compute(dev, |backend| {
            if let Compute::Cuda(gpu) = backend {
                return cuda::stat_sums(gpu, l, fresh, xr.cuda_ptr()?, sw.cuda_ptr()?, ws.cuda_ptr()?);
            }
            let (xs, part) = (xr.host()?, ws.host_mut()?);
            let all = bytemuck::cast_slice_mut::<i64, f64>(sw.host_mut()?);
            let (shift, s12) = all.split_at_mut(l.c);
            let (s1, s2) = s12.split_at_mut(l.c);
            if fresh {
                sums::first_sample_shift(l, xs, shift);
            }
            sums::stat_plane_sums(l, xs, shift, part);
            sums::fold_pairs(l, part, s1, s2, Fold::Ascending);
            Ok(())
        })?;
    }
    drop(ws);
    Ok(BatchNormStatSums {
        sums: sums_t,
        channels: l.c,
        count,
    })
}

/// Checks a `[C]` f32 tensor on `device`.
pub(super) fn check_vector(op: &'static str, name: &str, t: &Tensor, device: Device, c: usize) -> Result<()> {
    t.expect_dtype(op, DType::F32)?;
    if t.device() != device {
        return Err(CoreError::DeviceMismatch {
            op,
            a: device,
            b: t.device(),
        });
    }
    if t.dims() != [c] {
        return Err(CoreError::shape(
            op,
            format!("{name} of shape [{c}] (one value per channel)"),
            t.shape(),
        ));
    }
    Ok(())
}

/// The batch statistics from the sums over the whole batch, exactly as
/// [`super::batch_norm_train`] computes them (mean, `1 / sqrt(biased var + eps)`); when
/// `running` is given it is updated in place as there (`momentum` in `[0, 1]`, the variance
/// unbiased by `m / (m - 1)`). Needs at least two values per channel. Outputs `[C]` f32 each,
/// kind activation; no workspace.
pub fn batch_norm_stats_finish(
    sums: &BatchNormStatSums,
    running: Option<RunningStats<'_>>,
    momentum: f32,
    eps: f32,
) -> Result<BatchNormStats> {
    const OP: &str = "batch_norm_stats_finish";
    let c = sums.channels;
    check_eps(OP, eps)?;
    check_momentum(OP, momentum)?;
    check_values_per_channel(
        OP,
        sums.count,
        &format!("{} values per channel over its parts", sums.count),
    )?;
    let dev = sums.device();
    if let Some(r) = &running {
        check_vector(OP, "running mean", r.mean, dev, c)?;
        check_vector(OP, "running var", r.var, dev, c)?;
        check_running(OP, r, r.mean, c, &[])?;
    }
    let sr = sums.sums.read::<i64>(OP)?;
    let mut mean = KernelBuffer::<f32>::new(OP, dev, c, MemoryKind::Activation, Init::Overwritten)?;
    let mut invstd = KernelBuffer::<f32>::new(OP, dev, c, MemoryKind::Activation, Init::Overwritten)?;
    let mut run_w = match &running {
        Some(r) => Some((r.mean.write::<f32>(OP)?, r.var.write::<f32>(OP)?)),
        None => None,
    };
    let m = sums.count as f64;
    compute(dev, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let running = match run_w.as_mut() {
                Some((mw, vw)) => Some((mw.cuda_ptr()?, vw.cuda_ptr()?)),
                None => None,
            };
            let out = (mean.cuda_ptr()?, invstd.cuda_ptr()?);
            return cuda::finish_stats(gpu, c, (m, momentum, eps), sr.cuda_ptr()?, out, running);
        }
        let all = bytemuck::cast_slice::<i64, f64>(sr.host()?);
        let (ms, is) = (mean.host_mut()?, invstd.host_mut()?);
        let mut run = match run_w.as_mut() {
            Some((mw, vw)) => Some((mw.host_mut()?, vw.host_mut()?)),
            None => None,
        };
        for ch in 0..c {
            let (mu, var) = sums::mean_var(all[ch], all[c + ch], all[2 * c + ch], m);
            ms[ch] = mu as f32;
            is[ch] = sums::invstd(var, eps);
            if let Some((rm, rv)) = run.as_mut() {
                sums::running_update(&mut rm[ch], &mut rv[ch], mu, var, momentum, m);
            }
        }
        Ok(())
    })?;
    drop(run_w);
    Ok(BatchNormStats {
        mean: mean.into_tensor([c])?,
        invstd: invstd.into_tensor([c])?,
        count: sums.count,
    })
}

/// Training-mode normalisation of the part `x` of a batch with the batch's `stats`:
/// `y = (x - mean) * (invstd * weight) + bias` (weight 1 and bias 0 when absent), exactly as
/// [`super::batch_norm_train`] computes its output. Output kind activation; no workspace.
pub fn batch_norm_normalize(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &BatchNormStats,
) -> Result<Tensor> {
    const OP: &str = "batch_norm_normalize";
    let l = Layout::of(OP, x)?;
    check_channel(OP, "weight", weight, x, l.c)?;
    check_channel(OP, "bias", bias, x, l.c)?;
    check_channel(OP, "mean", Some(&stats.mean), x, l.c)?;
    check_channel(OP, "invstd", Some(&stats.invstd), x, l.c)?;
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let br = bias.map(|b| b.read::<f32>(OP)).transpose()?;
    let (mr, ir) = (stats.mean.read::<f32>(OP)?, stats.invstd.read::<f32>(OP)?);
    let dev = x.device();
    let mut y = KernelBuffer::<f32>::new(OP, dev, x.elem_count(), MemoryKind::Activation, Init::Overwritten)?;
    compute(dev, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let ptrs = cuda::NormalizePtrs {
                x: xr.cuda_ptr()?,
                mean: mr.cuda_ptr()?,
                invstd: ir.cuda_ptr()?,
                weight: wr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                bias: br.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                y: y.cuda_ptr()?,
            };
            return cuda::normalize(gpu, l, ptrs);
        }
        let (ws_, bs_) = (
            wr.as_ref().map(|r| r.host()).transpose()?,
            br.as_ref().map(|r| r.host()).transpose()?,
        );
        sums::normalize(l, xr.host()?, y.host_mut()?, (mr.host()?, ir.host()?), (ws_, bs_));
        Ok(())
    })?;
    y.into_tensor(x.shape().clone())
}
