//! conv2d backward that accumulates the weight and bias gradients one time step at a time.

use super::backward::{BackwardBufs, backward, bias_grad};
use super::cuda;
use super::params::Conv2dParams;
use super::{Workspace, backward_geometry, implicit, implicit_backward};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::kernels::WeightGradAcc;
use crate::memory::MemoryKind;
use crate::{KernelBuffer, Result, Tensor};

/// [`super::conv2d_backward`] with accumulators: backward of [`super::conv2d`] for a batch `[T*N, C, H, W]` folding `acc.time_steps`
/// time steps. Adds the weight and bias gradients into the accumulators of `acc`, time step
/// `T-1` first and `0` last (each step's images in order), and returns the input gradient when
/// `input` is set (a new [`MemoryKind::Gradient`] tensor). Images are grouped only within a
/// time step, so splitting the time steps into chunks processed last-chunk-first gives
/// bit-identical results. Workspace is tracked and freed before returning.
pub(super) fn conv2d_backward_acc(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    p: &Conv2dParams,
    acc: WeightGradAcc<'_>,
    input: bool,
) -> Result<Option<Tensor>> {
    const OP: &str = "conv2d_backward_acc";
    let g = backward_geometry(OP, grad, x, w, p)?;
    let per_step = acc.check(OP, w.dims(), g.co, g.b, &[grad, x, w])?;
    let step = g.with_batch(OP, super::per_step(OP, g.b, acc.time_steps)?)?;
    let (gr, xr, wr) = (grad.read::<f32>(OP)?, x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let device = x.device();
    // col2im scatter-adds into the input gradient; an implicit convolution writes all of it.
    let gx_init = if g.implicit() && implicit::input_grad_is_conv(&g.shape()) {
        Init::Overwritten
    } else {
        Init::Zeroed
    };
    let mut gx = input
        .then(|| KernelBuffer::<f32>::new(OP, device, x.elem_count(), MemoryKind::Gradient, gx_init))
        .transpose()?;
    let mut ws = Workspace::for_backward(OP, device, &step, input, acc.weight.is_some())?;
    let mut wacc = acc.weight.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut bacc = acc.bias.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    compute(device, |backend| {
        let (out_step, in_step) = (per_step * g.co * g.ho * g.wo, per_step * g.c * g.h * g.w);
        if let Compute::Cuda(gpu) = backend {
            let bufs = ws.gpu_bufs(&mut gemm_ws)?;
            let (gp, xp, wp) = (gr.cuda_ptr()?, xr.cuda_ptr()?, wr.cuda_ptr()?);
            let step_inputs = |t: usize| (gp.add_f32(t * out_step), xp.add_f32(t * in_step), wp);
            if let Some(gx) = gx.as_mut().map(|b| b.cuda_ptr()).transpose()? {
                for t in 0..acc.time_steps {
                    let grads = cuda::GpuGrads {
                        gx: Some(gx.add_f32(t * in_step)),
                        gw: None,
                        gb: None,
                        gw_accumulate: false,
                        gb_accumulate: false,
                    };
                    cuda::backward(gpu, &step, step_inputs(t), &grads, &bufs)?;
                }
            }
            // Time step T-1 first, each added into the accumulators (the CPU's order).
            let grads = cuda::GpuGrads {
                gx: None,
                gw: wacc.as_mut().map(|a| a.cuda_ptr()).transpose()?,
                gb: bacc.as_mut().map(|a| a.cuda_ptr()).transpose()?,
                gw_accumulate: true,
                gb_accumulate: true,
            };
            for t in (0..acc.time_steps).rev() {
                cuda::backward(gpu, &step, step_inputs(t), &grads, &bufs)?;
            }
            return Ok(());
        }
        let (gs, xs, wv) = (gr.host()?, xr.host()?, wr.host()?);
        if g.implicit() {
            // Time step T-1 first, each step's images in order: one chain per weight gradient
            // element, continued from the accumulator.
            let images: Vec<usize> = (0..acc.time_steps)
                .rev()
                .flat_map(|t| t * per_step..(t + 1) * per_step)
                .collect();
            let gx = gx.as_mut().map(|b| b.host_mut()).transpose()?;
            let gw = wacc.as_mut().map(|a| a.host_mut()).transpose()?;
            implicit_backward(&g, (gs, xs, wv), &mut ws, (gx, gw), per_step, &images)?;
            if let Some(ab) = bacc.as_mut().map(|a| a.host_mut()).transpose()? {
                let mut partial = vec![0f32; g.co];
                for t in (0..acc.time_steps).rev() {
                    bias_grad(&step, &gs[t * out_step..][..out_step], &mut partial);
                    ab.iter_mut().zip(&partial).for_each(|(a, &s)| *a += s);
                }
            }
            return Ok(());
        }
        let (col, stage) = ws.slices()?;
        if let Some(gx) = gx.as_mut().map(|b| b.host_mut()).transpose()? {
            for t in 0..acc.time_steps {
                let bufs = BackwardBufs {
                    gx: Some(&mut gx[t * in_step..][..in_step]),
                    gw: None,
                    gb: None,
                    col: &mut *col,
                    stage: &mut *stage,
                    accumulate: false,
                };
                backward(
                    &step,
                    &gs[t * out_step..][..out_step],
                    &xs[t * in_step..][..in_step],
                    wv,
                    bufs,
                );
            }
        }
        let mut partial = vec![0f32; g.co];
        for t in (0..acc.time_steps).rev() {
            let (gs_t, xs_t) = (&gs[t * out_step..][..out_step], &xs[t * in_step..][..in_step]);
            if let Some(aw) = wacc.as_mut().map(|a| a.host_mut()).transpose()? {
                let bufs = BackwardBufs {
                    gx: None,
                    gw: Some(aw),
                    gb: None,
                    col: &mut *col,
                    stage: &mut *stage,
                    accumulate: true,
                };
                backward(&step, gs_t, xs_t, wv, bufs);
            }
            if let Some(ab) = bacc.as_mut().map(|a| a.host_mut()).transpose()? {
                bias_grad(&step, gs_t, &mut partial);
                ab.iter_mut().zip(&partial).for_each(|(a, &s)| *a += s);
            }
        }
        Ok(())
    })?;
    drop((wacc, bacc, ws));
    gx.map(|b| b.into_tensor(x.shape().clone())).transpose()
}
