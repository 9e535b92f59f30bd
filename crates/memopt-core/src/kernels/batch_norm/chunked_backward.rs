//! The backward half of the chunked BatchNorm entry points (see `chunked.rs`): gradient sums
//! added part by part in reverse batch order, then the weight and bias gradients once and the
//! input gradient of each part, exactly as [`super::batch_norm_backward`] computes them.

use super::backward::GradData;
use super::chunked::{check_part, check_vector, zeroed_sums};
use super::sums::{self, Fold};
use super::{BatchNormGrads, BatchNormStats, Layout, check_channel, cuda};
use crate::backend::{Compute, Init, compute};
use crate::kernels::Operand;
use crate::kernels::accum::F64Workspace;
use crate::memory::MemoryKind;
use crate::{CoreError, DType, KernelBuffer, Result, Tensor};

/// The gradient sums of a BatchNorm over the parts of a batch added so far (by
/// [`batch_norm_grad_sums`]): per channel `sum(g)` and `sum(g * (x - mean))`, in f64.
#[derive(Debug)]
pub struct BatchNormGradSums {
    /// `[2, C]` f64 values as i64 bits: `sum(g)`, then `sum(g * (x - mean))`.
    sums: Tensor,
    channels: usize,
    count: usize,
}

impl BatchNormGradSums {
    /// Channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Values per channel added so far.
    pub fn count(&self) -> usize {
        self.count
    }
}

/// Checks a part's output gradient against its input: same shape, f32, same device.
fn check_grad(op: &'static str, grad_y: &Tensor, x: &Tensor) -> Result<()> {
    x.expect_same_device(op, grad_y)?;
    grad_y.expect_dtype(op, DType::F32)?;
    if grad_y.shape() != x.shape() {
        return Err(CoreError::shape(
            op,
            format!("grad_y of x's shape {}", x.shape()),
            grad_y.shape(),
        ));
    }
    Ok(())
}

/// Adds the part (`grad_y`, `x`) of a batch to the gradient sums `previous` (`None` for the
/// first part added) and returns them: per channel `sum(grad_y)` and
/// `sum(grad_y * (x - save_mean))`. Parts must come in reverse batch order (the last part
/// first), the order [`super::batch_norm_backward`] folds samples in. Allocates the `[2, C]`
/// sums for the first part (kind workspace), and tracked workspace of `16 * B * C` bytes during
/// the call.
pub fn batch_norm_grad_sums(
    grad_y: &Tensor,
    x: &Tensor,
    save_mean: &Tensor,
    previous: Option<BatchNormGradSums>,
) -> Result<BatchNormGradSums> {
    const OP: &str = "batch_norm_grad_sums";
    let l = Layout::of(OP, x)?;
    check_grad(OP, grad_y, x)?;
    check_channel(OP, "save_mean", Some(save_mean), x, l.c)?;
    let count = match &previous {
        Some(p) => check_part(OP, x, l, &p.sums, p.channels, p.count)?,
        None => l.per_channel(),
    };
    let (gr, xr, mr) = (
        grad_y.read::<f32>(OP)?,
        x.read::<f32>(OP)?,
        save_mean.read::<f32>(OP)?,
    );
    let dev = x.device();
    let sums_t = match previous {
        Some(p) => p.sums,
        None => zeroed_sums(OP, dev, 2, l.c)?,
    };
    let mut ws = F64Workspace::new(OP, dev, 2 * l.planes(), Init::Overwritten)?;
    {
        let mut sw = sums_t.write::<i64>(OP)?;
        compute(dev, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let ptrs = (gr.cuda_ptr()?, xr.cuda_ptr()?, mr.cuda_ptr()?);
                return cuda::grad_sums(gpu, l, ptrs, sw.cuda_ptr()?, ws.cuda_ptr()?);
            }
            let part = ws.host_mut()?;
            let all = bytemuck::cast_slice_mut::<i64, f64>(sw.host_mut()?);
            let (sum_g, dot) = all.split_at_mut(l.c);
            sums::grad_plane_sums(l, gr.host()?, xr.host()?, mr.host()?, part);
            sums::fold_pairs(l, part, sum_g, dot, Fold::Descending);
            Ok(())
        })?;
    }
    drop(ws);
    Ok(BatchNormGradSums {
        sums: sums_t,
        channels: l.c,
        count,
    })
}

/// The weight and bias gradients from the gradient sums over the whole batch, exactly as
/// [`super::batch_norm_backward`] computes them (`grad_weight = sum(g * (x - mean)) * invstd`,
/// `grad_bias = sum(g)`); each is computed when asked for (`weight`, `bias`). Outputs `[C]`
/// f32, kind gradient; no workspace.
pub fn batch_norm_param_grads(
    sums: &BatchNormGradSums,
    save_invstd: &Tensor,
    weight: bool,
    bias: bool,
) -> Result<BatchNormGrads> {
    const OP: &str = "batch_norm_param_grads";
    let (c, dev) = (sums.channels, sums.sums.device());
    check_vector(OP, "save_invstd", save_invstd, dev, c)?;
    let alloc = |need: bool| {
        need.then(|| KernelBuffer::<f32>::new(OP, dev, c, MemoryKind::Gradient, Init::Overwritten))
            .transpose()
    };
    let (mut gw, mut gb) = (alloc(weight)?, alloc(bias)?);
    if gw.is_some() || gb.is_some() {
        let (sr, ir) = (sums.sums.read::<i64>(OP)?, save_invstd.read::<f32>(OP)?);
        compute(dev, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let gw = gw.as_mut().map(KernelBuffer::cuda_ptr).transpose()?;
                let gb = gb.as_mut().map(KernelBuffer::cuda_ptr).transpose()?;
                return cuda::param_grads(gpu, c, sr.cuda_ptr()?, ir.cuda_ptr()?, (gw, gb));
            }
            let all = bytemuck::cast_slice::<i64, f64>(sr.host()?);
            let (sum_g, dot) = all.split_at(c);
            sums::param_grads(
                sum_g,
                dot,
                ir.host()?,
                gw.as_mut().map(KernelBuffer::host_mut).transpose()?,
                gb.as_mut().map(KernelBuffer::host_mut).transpose()?,
            );
            Ok(())
        })?;
    }
    Ok(BatchNormGrads {
        x: None,
        weight: gw.map(|b| b.into_tensor([c])).transpose()?,
        bias: gb.map(|b| b.into_tensor([c])).transpose()?,
    })
}

/// Arguments of [`batch_norm_backward_input`].
#[derive(Debug)]
pub struct BatchNormBackwardInput<'a> {
    /// Gradient of the part's output; handed over (see [`Operand`]), its storage may receive
    /// the input gradient in place.
    pub grad_y: Operand<'a>,
    /// The part's forward input.
    pub x: &'a Tensor,
    /// The forward's weight `[C]` (`None` means 1).
    pub weight: Option<&'a Tensor>,
    /// The batch statistics the forward normalised with.
    pub stats: &'a BatchNormStats,
    /// The gradient sums over the whole batch.
    pub sums: &'a BatchNormGradSums,
}

/// The input gradient of the part `x` of a batch, from the gradient sums over the whole batch,
/// exactly as [`super::batch_norm_backward`] computes it:
/// `invstd * w * (g - sum(g) / m - (x - mean) * sum(g (x - mean)) * invstd^2 / m)` with `m`
/// the statistics' values per channel (which the sums must cover). Output kind gradient,
/// written over a reusable `grad_y`; no workspace.
pub fn batch_norm_backward_input(args: BatchNormBackwardInput<'_>) -> Result<Tensor> {
    const OP: &str = "batch_norm_backward_input";
    let BatchNormBackwardInput {
        grad_y: grad_in,
        x,
        weight,
        stats,
        sums: totals,
    } = args;
    let grad_y = grad_in.tensor();
    let l = Layout::of(OP, x)?;
    check_grad(OP, grad_y, x)?;
    check_channel(OP, "weight", weight, x, l.c)?;
    check_channel(OP, "mean", Some(&stats.mean), x, l.c)?;
    check_channel(OP, "invstd", Some(&stats.invstd), x, l.c)?;
    check_part(OP, x, l, &totals.sums, totals.channels, 0)?;
    if totals.count != stats.count {
        return Err(CoreError::invalid(
            OP,
            format!(
                "the gradient sums cover {} values per channel, the statistics {}: add every part of the batch first",
                totals.count, stats.count
            ),
        ));
    }
    let in_place = grad_in.reusable() && !grad_y.same_storage(x);
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let (mr, ir) = (stats.mean.read::<f32>(OP)?, stats.invstd.read::<f32>(OP)?);
    let sr = totals.sums.read::<i64>(OP)?;
    let dev = x.device();
    let mut gx = (!in_place)
        .then(|| KernelBuffer::<f32>::new(OP, dev, x.elem_count(), MemoryKind::Gradient, Init::Overwritten))
        .transpose()?;
    {
        let mut grad_data = GradData::open(OP, grad_y, in_place)?;
        let m = stats.count as f64;
        compute(dev, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let g = grad_data.cuda_ptr()?;
                let ptrs = cuda::InputPtrs {
                    g,
                    x: xr.cuda_ptr()?,
                    weight: wr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                    mean: mr.cuda_ptr()?,
                    invstd: ir.cuda_ptr()?,
                    sums: sr.cuda_ptr()?,
                    // In place, the input gradient overwrites the output gradient.
                    gx: gx.as_mut().map(KernelBuffer::cuda_ptr).transpose()?.unwrap_or(g),
                };
                return cuda::backward_input(gpu, l, m, ptrs);
            }
            let all = bytemuck::cast_slice::<i64, f64>(sr.host()?);
            let (sum_g, dot) = all.split_at(l.c);
            let totals = sums::GradSums { sum_g, dot, m };
            let (xs, ws_) = (xr.host()?, wr.as_ref().map(|r| r.host()).transpose()?);
            let consts = (mr.host()?, ir.host()?, ws_);
            if let Some(out) = gx.as_mut().map(KernelBuffer::host_mut).transpose()? {
                let gs = grad_data.host()?;
                sums::input_grad(l, out, Some(gs), xs, consts, &totals);
            } else if let Some(out) = grad_data.host_mut()? {
                sums::input_grad(l, out, None, xs, consts, &totals);
            }
            Ok(())
        })?;
    }
    match gx {
        Some(b) => b.into_tensor(x.shape().clone()),
        None => grad_in
            .into_given()
            .ok_or_else(|| CoreError::invalid(OP, "an in-place input gradient needs a handed-over grad_y")),
    }
}
