//! Backward of training-mode batch normalisation.

use super::{Layout, at, check_channel, cuda};
use crate::backend::{Compute, Init, compute};
use crate::cuda::CudaPtr;
use crate::kernels::accum::{F64Workspace, sum_f64, sum_zip_f64};
use crate::kernels::{GradNeeds, Operand};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

/// Gradients returned by [`batch_norm_backward`]; each is `Some` exactly when asked for.
pub struct BatchNormGrads {
    /// Gradient of `x`, shape of `x`.
    pub x: Option<Tensor>,
    /// Gradient of the weight, `[C]`.
    pub weight: Option<Tensor>,
    /// Gradient of the bias, `[C]`.
    pub bias: Option<Tensor>,
}

/// Arguments of [`batch_norm_backward`].
#[derive(Debug)]
pub struct BatchNormBackward<'a> {
    /// Gradient of the output, shape of `x`; handed over (see [`Operand`]), its storage may
    /// receive the input gradient in place (after the per-channel sums have read it), and no
    /// buffer is allocated for it.
    pub grad_y: Operand<'a>,
    /// The forward's input.
    pub x: &'a Tensor,
    /// The forward's weight `[C]` (`None` means 1).
    pub weight: Option<&'a Tensor>,
    /// The forward's batch mean per channel, `[C]`.
    pub save_mean: &'a Tensor,
    /// The forward's `1 / sqrt(biased variance + eps)` per channel, `[C]`.
    pub save_invstd: &'a Tensor,
    /// Which gradients to compute (callers without affine parameters ask for neither weight
    /// nor bias).
    pub needs: GradNeeds,
}

/// Backward of [`super::batch_norm_train`] (PyTorch's formula), with `xhat = (x - save_mean) *
/// save_invstd` recomputed from `x`:
/// `grad_x = invstd * w * (g - mean(g) - xhat * mean(g * xhat))`, `grad_weight = sum(g * xhat)`,
/// `grad_bias = sum(g)`, means and sums per channel. The gradients are returned whenever
/// `needs` asks for them. Outputs are Gradient; tracked workspace of `8 * (2*B*C + 2*C)` bytes
/// lives during the call.
pub fn batch_norm_backward(args: BatchNormBackward<'_>) -> Result<BatchNormGrads> {
    const OP: &str = "batch_norm_backward";
    let BatchNormBackward {
        grad_y: grad_in,
        x,
        weight,
        save_mean,
        save_invstd,
        needs,
    } = args;
    let grad_y = grad_in.tensor();
    let l = Layout::of(OP, x)?;
    x.expect_same_device(OP, grad_y)?;
    if grad_y.shape() != x.shape() {
        return Err(CoreError::shape(
            OP,
            format!("grad_y of x's shape {}", x.shape()),
            grad_y.shape(),
        ));
    }
    check_channel(OP, "weight", weight, x, l.c)?;
    check_channel(OP, "save_mean", Some(save_mean), x, l.c)?;
    check_channel(OP, "save_invstd", Some(save_invstd), x, l.c)?;
    grad_y.expect_dtype(OP, crate::DType::F32)?;
    let in_place = needs.input && grad_in.reusable() && !grad_y.same_storage(x);
    let xr = x.read::<f32>(OP)?;
    let wr = weight.map(|w| w.read::<f32>(OP)).transpose()?;
    let (mr, ir) = (save_mean.read::<f32>(OP)?, save_invstd.read::<f32>(OP)?);
    if !(needs.input || needs.weight || needs.bias) {
        return Ok(BatchNormGrads {
            x: None,
            weight: None,
            bias: None,
        });
    }
    let dev = x.device();
    let alloc = |need: bool, len: usize| {
        need.then(|| KernelBuffer::<f32>::new(OP, dev, len, MemoryKind::Gradient, Init::Overwritten))
            .transpose()
    };
    let mut gx = alloc(needs.input && !in_place, x.elem_count())?;
    let mut gw = alloc(needs.weight, l.c)?;
    let mut gb = alloc(needs.bias, l.c)?;
    // Workspace: per-plane (sum g, sum g*(x-mean)) pairs, then the same two sums per channel.
    let mut ws = F64Workspace::new(OP, dev, 2 * l.planes() + 2 * l.c, Init::Overwritten)?;
    {
        // The output gradient: read only, or read then overwritten with the input gradient.
        let mut grad_data = GradData::open(OP, grad_y, in_place)?;
        compute(dev, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let g = grad_data.cuda_ptr()?;
                // In place, the input gradient overwrites the output gradient.
                let gx = match (gx.as_mut().map(KernelBuffer::cuda_ptr).transpose()?, in_place) {
                    (Some(p), _) => Some(p),
                    (None, true) => Some(g),
                    (None, false) => None,
                };
                let ptrs = cuda::BackwardPtrs {
                    g,
                    x: xr.cuda_ptr()?,
                    weight: wr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                    save_mean: mr.cuda_ptr()?,
                    save_invstd: ir.cuda_ptr()?,
                    gx,
                    gw: gw.as_mut().map(KernelBuffer::cuda_ptr).transpose()?,
                    gb: gb.as_mut().map(KernelBuffer::cuda_ptr).transpose()?,
                    ws: ws.cuda_ptr()?,
                };
                return cuda::backward(gpu, l, ptrs);
            }
            let (gs, xs, means, invstds, w) = (
                grad_data.host()?,
                xr.host()?,
                mr.host()?,
                ir.host()?,
                ws.host_mut()?,
            );
            let (part, sums) = w.split_at_mut(2 * l.planes());
            let (sum_g, dot) = sums.split_at_mut(l.c);
            part.par_chunks_mut(2)
                .enumerate()
                .with_min_len(l.min_planes())
                .for_each(|(p, pair)| {
                    let (g, xp) = (&gs[l.plane(p)], &xs[l.plane(p)]);
                    let mu = means[p % l.c] as f64;
                    pair[0] = sum_f64(g);
                    pair[1] = sum_zip_f64(g, xp, |g, x| g as f64 * (x as f64 - mu));
                });
            sum_g.fill(0.0);
            dot.fill(0.0);
            for row in part.chunks_exact(2 * l.c.max(1)) {
                for c in 0..l.c {
                    sum_g[c] += row[2 * c];
                    dot[c] += row[2 * c + 1];
                }
            }
            if let Some(b) = gb.as_mut().map(KernelBuffer::host_mut).transpose()? {
                for c in 0..l.c {
                    b[c] = sum_g[c] as f32;
                }
            }
            if let Some(wg) = gw.as_mut().map(KernelBuffer::host_mut).transpose()? {
                for c in 0..l.c {
                    wg[c] = (dot[c] * invstds[c] as f64) as f32;
                }
            }
            let ws_ = wr.as_ref().map(|r| r.host()).transpose()?;
            let m = l.per_channel() as f64;
            let (sum_g, dot): (&[f64], &[f64]) = (sum_g, dot);
            let grad_x = |p: usize, g: f32, x: f32| {
                let c = p % l.c;
                let invstd = invstds[c] as f64;
                let a = (invstd * at(ws_, c, 1.0) as f64) as f32;
                let mean_g = (sum_g[c] / m) as f32;
                let k = (dot[c] * invstd * invstd / m) as f32;
                a * (g - mean_g - (x - means[c]) * k)
            };
            if m > 0.0 {
                if let Some(out) = gx.as_mut().map(KernelBuffer::host_mut).transpose()? {
                    l.for_planes(out, |p, op| {
                        let (gp, xp) = (&gs[l.plane(p)], &xs[l.plane(p)]);
                        for (o, (&g, &x)) in op.iter_mut().zip(gp.iter().zip(xp)) {
                            *o = grad_x(p, g, x);
                        }
                    });
                } else if let Some(out) = grad_data.host_mut()? {
                    l.for_planes(out, |p, op| {
                        for (o, &x) in op.iter_mut().zip(&xs[l.plane(p)]) {
                            *o = grad_x(p, *o, x);
                        }
                    });
                }
            }
            Ok(())
        })?;
    }
    drop(ws);
    let gx = match (gx, in_place) {
        (Some(b), _) => Some(b.into_tensor(x.shape().clone())?),
        (None, true) => grad_in.into_given(),
        (None, false) => None,
    };
    Ok(BatchNormGrads {
        x: gx,
        weight: gw.map(|b| b.into_tensor([l.c])).transpose()?,
        bias: gb.map(|b| b.into_tensor([l.c])).transpose()?,
    })
}

/// Access to the output gradient's data: shared, or exclusive when it is overwritten.
enum GradData<'a> {
    Read(crate::DataRead<'a, f32>),
    Write(crate::DataWrite<'a, f32>),
}

impl<'a> GradData<'a> {
    fn open(op: &'static str, g: &'a Tensor, write: bool) -> Result<Self> {
        Ok(if write {
            GradData::Write(g.write::<f32>(op)?)
        } else {
            GradData::Read(g.read::<f32>(op)?)
        })
    }

    fn host(&mut self) -> Result<&[f32]> {
        match self {
            GradData::Read(r) => r.host(),
            GradData::Write(w) => w.host_mut().map(|s| &*s),
        }
    }

    /// The device address of the data, for the CUDA half.
    fn cuda_ptr(&mut self) -> Result<CudaPtr> {
        match self {
            GradData::Read(r) => r.cuda_ptr(),
            GradData::Write(w) => w.cuda_ptr(),
        }
    }

    /// The data to overwrite, when it was opened for writing.
    fn host_mut(&mut self) -> Result<Option<&mut [f32]>> {
        match self {
            GradData::Read(_) => Ok(None),
            GradData::Write(w) => w.host_mut().map(Some),
        }
    }
}
