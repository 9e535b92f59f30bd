//! Backward of training-mode batch normalisation.

use super::sums::{self, Fold};
use super::{Layout, check_channel, cuda};
use crate::backend::{Compute, Init, compute};
use crate::cuda::CudaPtr;
use crate::kernels::accum::F64Workspace;
use crate::kernels::{GradNeeds, Operand};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};

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
/// `needs` asks for them. The per-channel sums fold the samples last first (`sums.rs`), so that
/// [`super::batch_norm_grad_sums`] over consecutive parts of the batch, last part first, gives
/// the same bits. Outputs are Gradient; tracked workspace of `8 * (2*B*C + 2*C)` bytes
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
            let (part, per_channel) = w.split_at_mut(2 * l.planes());
            let (sum_g, dot) = per_channel.split_at_mut(l.c);
            sums::grad_plane_sums(l, gs, xs, means, part);
            sum_g.fill(0.0);
            dot.fill(0.0);
            sums::fold_pairs(l, part, sum_g, dot, Fold::Descending);
            sums::param_grads(
                sum_g,
                dot,
                invstds,
                gw.as_mut().map(KernelBuffer::host_mut).transpose()?,
                gb.as_mut().map(KernelBuffer::host_mut).transpose()?,
            );
            let ws_ = wr.as_ref().map(|r| r.host()).transpose()?;
            let totals = sums::GradSums {
                sum_g,
                dot,
                m: l.per_channel() as f64,
            };
            let consts = (means, invstds, ws_);
            if let Some(out) = gx.as_mut().map(KernelBuffer::host_mut).transpose()? {
                let gs = grad_data.host()?;
                sums::input_grad(l, out, Some(gs), xs, consts, &totals);
            } else if let Some(out) = grad_data.host_mut()? {
                sums::input_grad(l, out, None, xs, consts, &totals);
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
pub(super) enum GradData<'a> {
    Read(crate::DataRead<'a, f32>),
    Write(crate::DataWrite<'a, f32>),
}

impl<'a> GradData<'a> {
    pub(super) fn open(op: &'static str, g: &'a Tensor, write: bool) -> Result<Self> {
        Ok(if write {
            GradData::Write(g.write::<f32>(op)?)
        } else {
            GradData::Read(g.read::<f32>(op)?)
        })
    }

    pub(super) fn host(&mut self) -> Result<&[f32]> {
        match self {
            GradData::Read(r) => r.host(),
            GradData::Write(w) => w.host_mut().map(|s| &*s),
        }
    }

    /// The device address of the data, for the CUDA half.
    pub(super) fn cuda_ptr(&mut self) -> Result<CudaPtr> {
        match self {
            GradData::Read(r) => r.cuda_ptr(),
            GradData::Write(w) => w.cuda_ptr(),
        }
    }

    /// The data to overwrite, when it was opened for writing.
    pub(super) fn host_mut(&mut self) -> Result<Option<&mut [f32]>> {
        match self {
            GradData::Read(_) => Ok(None),
            GradData::Write(w) => w.host_mut().map(Some),
        }
    }
}
