//! conv2d and its accumulating backward on an input read one time step at a time
//! ([`StepInput`]): each step's images are written into a one-step buffer, then run through the
//! same algorithm as [`super::conv2d`], so the results are bit-identical while only one step of
//! the input ever exists as f32.
//!
//! On the CPU (one group) that algorithm is the implicit GEMM, whose every output element is
//! one chain of fused multiply-adds whatever images a call holds: the forward runs one call per
//! time step; the input gradient (which reads no input) runs exactly the dense kernel's call;
//! the weight gradient continues each element's chain from the accumulator over time step
//! `T-1`'s pixels first, then `T-2`'s, ..., the order of the dense kernel's single call. Grouped
//! convolutions and CUDA run im2col + GEMM per time step, as the dense kernels do.

use super::backward::{BackwardBufs, backward, bias_grad};
use super::forward::{ForwardBufs, forward};
use super::params::{Conv2dParams, ConvGeom};
use super::{Workspace, check_grad_shape, cuda, implicit, implicit_input_grad, per_step};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cpu_isa::CpuIsa;
use crate::cuda::CudaPtr;
use crate::kernels::WeightGradAcc;
use crate::kernels::matmul::check_f32_same_device;
use crate::kernels::step_input::{StepInput, check_step_device, steps_first_to_last, steps_last_to_first};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor, host_vec_with_capacity};

/// [`super::conv2d`] of an input read one time step at a time: `x [T*N, C, H, W]` folding
/// `time_steps` steps, `w [Co, C / groups, kh, kw]`, `b [Co]`. Allocates, in this order, the
/// output ([`MemoryKind::Activation`]), the im2col and staging workspace (none for an implicit
/// GEMM: [`crate::backend::Target::conv_implicit_gemm`]), one time step of the input (`N*C*H*W` f32, [`MemoryKind::Workspace`]) and the GEMM workspace; the workspace is
/// freed before returning. Bit-identical to [`super::conv2d`] on the same values.
pub fn conv2d_stepwise(
    x: &dyn StepInput,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
    time_steps: usize,
) -> Result<Tensor> {
    const OP: &str = "conv2d_stepwise";
    check_f32_same_device(OP, &[w])?;
    if let Some(b) = b {
        check_f32_same_device(OP, &[w, b])?;
    }
    check_step_device(OP, x, w)?;
    let device = x.device();
    let g = ConvGeom::for_input(OP, x.shape(), device, w, p)?;
    if let Some(b) = b
        && b.dims() != [g.co]
    {
        return Err(CoreError::shape(
            OP,
            format!("a bias of shape [{}] (one per output channel)", g.co),
            b.shape(),
        ));
    }
    let step = g.with_batch(OP, per_step(OP, g.b, time_steps)?)?;
    let (in_step, out_step) = (step_len(OP, &step)?, step.out_len());
    let wr = w.read::<f32>(OP)?;
    let br = b.map(|b| b.read::<f32>(OP)).transpose()?;
    let mut out =
        KernelBuffer::<f32>::new(OP, device, g.out_len(), MemoryKind::Activation, Init::Overwritten)?;
    let mut ws = Workspace::new(OP, device, &step, !step.implicit())?;
    let mut x_t = KernelBuffer::<f32>::workspace(OP, device, in_step, Init::Overwritten)?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    for t in steps_first_to_last(device, time_steps) {
        x.write_span(OP, t * in_step, &mut x_t)?;
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let bufs = ws.gpu_bufs(&mut gemm_ws)?;
                let bias = br.as_ref().map(|b| b.cuda_ptr()).transpose()?;
                let inputs = (x_t.cuda_ptr()?, wr.cuda_ptr()?, bias);
                return cuda::forward(gpu, &step, inputs, out.cuda_ptr()?.add_f32(t * out_step), &bufs);
            }
            let (wv, o) = (wr.host()?, out.host_mut()?);
            let bias = br.as_ref().map(|b| b.host()).transpose()?;
            let out_t = &mut o[t * out_step..][..out_step];
            if step.implicit() {
                // Each output's chain is the dense call's: it does not depend on the images
                // the call holds.
                implicit::forward(
                    CpuIsa::selected(),
                    &step.shape(),
                    x_t.host_mut()?,
                    wv,
                    bias,
                    out_t,
                );
                return Ok(());
            }
            let (col, stage) = ws.slices()?;
            let bufs = ForwardBufs {
                out: out_t,
                col,
                stage,
            };
            forward(&step, x_t.host_mut()?, wv, bias, bufs);
            Ok(())
        })?;
    }
    drop((ws, x_t, gemm_ws));
    out.into_tensor(g.out_dims())
}

/// Elements of one time step's input `[N, C, H, W]`.
fn step_len(op: &'static str, step: &ConvGeom) -> Result<usize> {
    [step.c, step.h, step.w]
        .into_iter()
        .try_fold(step.b, usize::checked_mul)
        .ok_or_else(|| {
            CoreError::invalid(
                op,
                "one time step of the input has more elements than fit in usize",
            )
        })
}

/// The arguments of [`conv2d_backward_stepwise`].
#[derive(Clone, Copy)]
pub struct Conv2dBackwardStepwise<'a> {
    /// Gradient of the output, `[T*N, Co, Ho, Wo]`.
    pub grad: &'a Tensor,
    /// The forward's input, `[T*N, C, H, W]`, read one time step at a time.
    pub x: &'a dyn StepInput,
    /// The forward's weight, `[Co, C / groups, kh, kw]`.
    pub w: &'a Tensor,
    /// The forward's stride, padding, dilation and groups.
    pub params: &'a Conv2dParams,
    /// Whether the input gradient is wanted.
    pub input: bool,
    /// The weight and bias gradient accumulators and the time steps the batch folds.
    pub acc: WeightGradAcc<'a>,
}

/// [`super::conv2d_backward`] with accumulators ([`super::Conv2dBackward::acc`]) for an input
/// read one time step at a time. Returns the input gradient when `args.input` is set (a new
/// [`MemoryKind::Gradient`] tensor; it needs no input values) and adds the weight and bias
/// gradients into the accumulators, time step `T-1` first, unpacking each step's input into a
/// one-step buffer just before its weight gradient. Allocates, in this order, the input
/// gradient, the workspace the dense backward takes (`Workspace::for_backward`), the one-step
/// input buffer (only when the weight gradient is wanted) and the GEMM workspace. Bit-identical
/// to the dense backward with accumulators.
pub fn conv2d_backward_stepwise(args: Conv2dBackwardStepwise<'_>) -> Result<Option<Tensor>> {
    const OP: &str = "conv2d_backward_stepwise";
    let Conv2dBackwardStepwise {
        grad,
        x,
        w,
        params,
        input,
        acc,
    } = args;
    check_f32_same_device(OP, &[grad, w])?;
    check_step_device(OP, x, w)?;
    let device = x.device();
    let g = ConvGeom::for_input(OP, x.shape(), device, w, params)?;
    check_grad_shape(OP, grad, &g)?;
    let step = g.with_batch(OP, acc.check(OP, w.dims(), g.co, g.b, &[grad, w])?)?;
    let (in_step, out_step) = (step_len(OP, &step)?, step.out_len());
    let (gr, wr) = (grad.read::<f32>(OP)?, w.read::<f32>(OP)?);
    // col2im scatter-adds into the input gradient; an implicit convolution writes all of it.
    let gx_init = if g.implicit() && implicit::input_grad_is_conv(&g.shape()) {
        Init::Overwritten
    } else {
        Init::Zeroed
    };
    let mut gx = input
        .then(|| {
            let len = x.shape().elem_count();
            KernelBuffer::<f32>::new(OP, device, len, MemoryKind::Gradient, gx_init)
        })
        .transpose()?;
    let mut ws = Workspace::for_backward(OP, device, &step, input, acc.weight.is_some())?;
    let mut x_t = acc
        .weight
        .is_some()
        .then(|| KernelBuffer::<f32>::workspace(OP, device, in_step, Init::Overwritten))
        .transpose()?;
    let mut wacc = acc.weight.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut bacc = acc.bias.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    // The input gradient reads only the output gradient and the weight (as the dense kernel's).
    if let Some(gx) = gx.as_mut() {
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let bufs = ws.gpu_bufs(&mut gemm_ws)?;
                let (gp, wp, gxp) = (gr.cuda_ptr()?, wr.cuda_ptr()?, gx.cuda_ptr()?);
                for t in 0..acc.time_steps {
                    let grads = cuda::GpuGrads {
                        gx: Some(gxp.add_f32(t * in_step)),
                        gw: None,
                        gb: None,
                        gw_accumulate: false,
                        gb_accumulate: false,
                    };
                    // No weight gradient: the input's address is never read.
                    let inputs = (gp.add_f32(t * out_step), CudaPtr(0), wp);
                    cuda::backward(gpu, &step, inputs, &grads, &bufs)?;
                }
                return Ok(());
            }
            let (gs, wv, gxs) = (gr.host()?, wr.host()?, gx.host_mut()?);
            if g.implicit() {
                // The dense kernel's call, on the whole batch.
                return implicit_input_grad(&g, gs, wv, &mut ws, gxs, step.b);
            }
            let (col, stage) = ws.slices()?;
            for t in 0..acc.time_steps {
                let bufs = BackwardBufs {
                    gx: Some(&mut gxs[t * in_step..][..in_step]),
                    gw: None,
                    gb: None,
                    col: &mut *col,
                    stage: &mut *stage,
                    accumulate: false,
                };
                // No weight gradient: the input is never read.
                backward(&step, &gs[t * out_step..][..out_step], &[], wv, bufs);
            }
            Ok(())
        })?;
    }
    let mut partial = vec![0f32; g.co];
    // The images of one step, for the implicit weight gradient: built on the first CPU step.
    let mut images: Vec<usize> = Vec::new();
    // Time step T-1 first, each added into the accumulators (the dense kernel's order).
    for t in steps_last_to_first(device, acc.time_steps) {
        if let Some(x_t) = x_t.as_mut() {
            x.write_span(OP, t * in_step, x_t)?;
        }
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let bufs = ws.gpu_bufs(&mut gemm_ws)?;
                let grads = cuda::GpuGrads {
                    gx: None,
                    gw: wacc.as_mut().map(|a| a.cuda_ptr()).transpose()?,
                    gb: bacc.as_mut().map(|a| a.cuda_ptr()).transpose()?,
                    gw_accumulate: true,
                    gb_accumulate: true,
                };
                let xp = x_t.as_mut().map(|b| b.cuda_ptr()).transpose()?;
                let inputs = (
                    gr.cuda_ptr()?.add_f32(t * out_step),
                    xp.unwrap_or(CudaPtr(0)),
                    wr.cuda_ptr()?,
                );
                return cuda::backward(gpu, &step, inputs, &grads, &bufs);
            }
            let gs_t = &gr.host()?[t * out_step..][..out_step];
            let wv = wr.host()?;
            let aw = wacc.as_mut().map(|a| a.host_mut()).transpose()?;
            if let (Some(aw), Some(x_t)) = (aw, x_t.as_mut()) {
                let xs_t = x_t.host_mut()?;
                if step.implicit() {
                    // Each element's chain continues from the accumulator over this step's
                    // pixels, as the dense call's continues from step t+1's into step t's.
                    if images.len() != step.b {
                        images = host_vec_with_capacity(step.b)?;
                        images.extend(0..step.b);
                    }
                    implicit::weight_grad(CpuIsa::selected(), &step.shape(), gs_t, xs_t, &images, aw);
                } else {
                    let (col, stage) = ws.slices()?;
                    let bufs = BackwardBufs {
                        gx: None,
                        gw: Some(aw),
                        gb: None,
                        col,
                        stage,
                        accumulate: true,
                    };
                    backward(&step, gs_t, xs_t, wv, bufs);
                }
            }
            if let Some(ab) = bacc.as_mut().map(|a| a.host_mut()).transpose()? {
                bias_grad(&step, gs_t, &mut partial);
                ab.iter_mut().zip(&partial).for_each(|(a, &s)| *a += s);
            }
            Ok(())
        })?;
    }
    drop((wacc, bacc, ws, x_t, gemm_ws));
    gx.map(|b| b.into_tensor(x.shape().clone())).transpose()
}
