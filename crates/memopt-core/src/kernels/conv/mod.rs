//! 2-d convolution with PyTorch semantics (stride, padding, dilation, groups), forward and
//! backward, as im2col + GEMM.
//!
//! Images are processed in chunks of enough images to give 1024 GEMM columns (output pixels),
//! a function of the shapes only: the chunk's im2col columns go to a tracked workspace buffer,
//! and each group is one GEMM that rayon parallelizes inside when it is big; small GEMMs run in
//! parallel with each other instead. Several images per chunk also need a staging buffer
//! `[Co, images x pixels]` between the GEMM and the `[B, Co, Ho, Wo]` layout. 1x1 kernels with stride 1 and no padding use the input as its own column matrix and
//! allocate no workspace. All workspace is freed before the kernel returns.

mod accumulate;
mod backward;
mod cuda;
mod forward;
mod im2col;
mod implicit;
mod pack;
mod pack_simd;
mod params;
mod stepwise;
#[cfg(test)]
mod tests;

pub use params::Conv2dParams;
pub use stepwise::{Conv2dBackwardStepwise, conv2d_backward_stepwise, conv2d_stepwise};

use super::matmul::{GemmPar, check_f32_same_device};
use super::{GradNeeds, WeightGradAcc};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cpu_isa::CpuIsa;
use crate::cuda::CudaPtr;
use crate::cuda::gemm::workspace_of;
use crate::memory::MemoryKind;
use crate::{CoreError, Device, KernelBuffer, Result, Shape, Tensor};
use params::ConvGeom;
use rayon::prelude::*;

/// Runs `f(index, block, par)` on the consecutive blocks of `len` elements of `dst`, each the
/// destination of GEMMs of `macs` multiply-adds: one block after the other (GEMMs parallel
/// inside) when the GEMMs are big, the blocks in parallel (GEMMs serial) when they are small.
fn for_each_product(
    dst: &mut [f32],
    len: usize,
    macs: usize,
    f: impl Fn(usize, &mut [f32], GemmPar) + Sync + Send,
) {
    if len == 0 {
        return;
    }
    let blocks = dst.len() / len;
    match GemmPar::for_size(macs) {
        GemmPar::Serial if blocks > 1 && GemmPar::for_size(blocks * macs) == GemmPar::Auto => dst
            .par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, d)| f(i, d, GemmPar::Serial)),
        par => dst.chunks_mut(len).enumerate().for_each(|(i, d)| f(i, d, par)),
    }
}

/// The im2col and staging workspace of one call and the flipped weights of an implicit input
/// gradient, allocated on the calling thread.
pub(super) struct Workspace {
    col: Option<KernelBuffer<f32>>,
    stage: Option<KernelBuffer<f32>>,
    flip: Option<KernelBuffer<f32>>,
}

impl Workspace {
    /// Allocates the buffers `g` calls for when `needed` (none otherwise).
    fn new(op: &'static str, device: Device, g: &ConvGeom, needed: bool) -> Result<Self> {
        let (col, stage) = if needed {
            (g.col_len(), g.stage_len())
        } else {
            (0, 0)
        };
        Self::with_lens(op, device, col, stage, 0)
    }

    /// Allocates `col`, `stage` and `flip` elements, in that order (no buffer for 0).
    pub(super) fn with_lens(
        op: &'static str,
        device: Device,
        col: usize,
        stage: usize,
        flip: usize,
    ) -> Result<Self> {
        let alloc = |len: usize| {
            (len > 0)
                .then(|| KernelBuffer::<f32>::workspace(op, device, len, Init::Overwritten))
                .transpose()
        };
        Ok(Workspace {
            col: alloc(col)?,
            stage: alloc(stage)?,
            flip: alloc(flip)?,
        })
    }

    /// The buffers of a backward call of `g` (whole batch or one time step of it) wanting the
    /// input gradient (`input`) and/or the weight gradient (`weight`): im2col columns and
    /// staging where the call runs im2col + GEMM, the flipped weights where its input gradient
    /// is an implicit convolution.
    pub(super) fn for_backward(
        op: &'static str,
        device: Device,
        g: &ConvGeom,
        input: bool,
        weight: bool,
    ) -> Result<Self> {
        if g.implicit() {
            let conv = input && implicit::input_grad_is_conv(&g.shape());
            let im2col = input && !conv;
            let (col, stage) = if im2col {
                (g.col_len(), g.stage_len())
            } else {
                (0, 0)
            };
            let flip = if conv { g.co * g.k() } else { 0 };
            return Self::with_lens(op, device, col, stage, flip);
        }
        Self::new(op, device, g, input || weight)
    }

    /// The flipped weights (empty when the call needs none).
    pub(super) fn flip_mut(&mut self) -> Result<&mut [f32]> {
        Ok(match self.flip.as_mut().map(|b| b.host_mut()).transpose()? {
            Some(s) => s,
            None => &mut [],
        })
    }

    /// The device buffers of the CUDA half of an op, with the op's GEMM workspace `gemm_ws`
    /// (null addresses where a buffer was not needed: the algorithm never reads those).
    fn gpu_bufs(&mut self, gemm_ws: &mut Option<KernelBuffer<u8>>) -> Result<cuda::GpuBufs> {
        fn ptr(b: &mut Option<KernelBuffer<f32>>) -> Result<CudaPtr> {
            Ok(b.as_mut()
                .map(|b| b.cuda_ptr())
                .transpose()?
                .unwrap_or(CudaPtr(0)))
        }
        Ok(cuda::GpuBufs {
            gemm_ws: workspace_of(gemm_ws)?,
            col: ptr(&mut self.col)?,
            stage: ptr(&mut self.stage)?,
        })
    }

    /// The host slices, for the CPU half of an op (empty where a buffer was not needed).
    pub(super) fn slices(&mut self) -> Result<(&mut [f32], &mut [f32])> {
        fn slice(b: &mut Option<KernelBuffer<f32>>) -> Result<&mut [f32]> {
            Ok(match b.as_mut().map(|b| b.host_mut()).transpose()? {
                Some(s) => s,
                None => &mut [],
            })
        }
        Ok((slice(&mut self.col)?, slice(&mut self.stage)?))
    }
}

/// `x [B, C, H, W]` convolved with `w [Co, C / groups, kh, kw]`, plus `b [Co]`, giving
/// `[B, Co, Ho, Wo]` (PyTorch's `conv2d`). The batch folds `time_steps` time steps
/// (`[T*N, C, H, W]`; 1 for a plain batch): images are grouped for the GEMMs only within a time
/// step, so every GEMM has the same shape whether the time steps run together or in chunks, and
/// the results are bit-identical either way. The im2col buffer is tracked as
/// [`MemoryKind::Workspace`] and freed before returning; the output is an
/// [`MemoryKind::Activation`].
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
    time_steps: usize,
) -> Result<Tensor> {
    const OP: &str = "conv2d";
    let g = forward_geometry(OP, x, w, b, p)?;
    let step = g.with_batch(OP, per_step(OP, g.b, time_steps)?)?;
    let (xr, wr) = (x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let br = b.map(|b| b.read::<f32>(OP)).transpose()?;
    let device = x.device();
    let mut out =
        KernelBuffer::<f32>::new(OP, device, g.out_len(), MemoryKind::Activation, Init::Overwritten)?;
    let mut ws = Workspace::new(OP, device, &step, !step.implicit())?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    compute(device, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let bufs = ws.gpu_bufs(&mut gemm_ws)?;
            let (xp, wp, op) = (xr.cuda_ptr()?, wr.cuda_ptr()?, out.cuda_ptr()?);
            let bias = br.as_ref().map(|b| b.cuda_ptr()).transpose()?;
            let (in_step, out_step) = (step.b * g.c * g.h * g.w, step.out_len());
            // One time step after the other, as the CPU: the same chunks however steps group.
            for t in 0..time_steps {
                let inputs = (xp.add_f32(t * in_step), wp, bias);
                cuda::forward(gpu, &step, inputs, op.add_f32(t * out_step), &bufs)?;
            }
            return Ok(());
        }
        let (xs, wv, o) = (xr.host()?, wr.host()?, out.host_mut()?);
        let bias = br.as_ref().map(|b| b.host()).transpose()?;
        if g.implicit() {
            // Every output is one chain over the inner index whatever the grouping of images,
            // so the time steps run together.
            implicit::forward(CpuIsa::selected(), &g.shape(), xs, wv, bias, o);
            return Ok(());
        }
        let (col, stage) = ws.slices()?;
        let (in_step, out_step) = (step.b * g.c * g.h * g.w, step.out_len());
        for t in 0..time_steps {
            let bufs = forward::ForwardBufs {
                out: &mut o[t * out_step..][..out_step],
                col: &mut *col,
                stage: &mut *stage,
            };
            forward::forward(&step, &xs[t * in_step..][..in_step], wv, bias, bufs);
        }
        Ok(())
    })?;
    drop(ws);
    out.into_tensor(g.out_dims())
}

/// The shape `[B, Co, Ho, Wo]` [`conv2d`] gives for these arguments, which are validated as
/// [`conv2d`] validates them; nothing is read or allocated. Used to stand in for an output that
/// is not computed because nobody reads it.
pub fn conv2d_output_shape(x: &Tensor, w: &Tensor, b: Option<&Tensor>, p: &Conv2dParams) -> Result<Shape> {
    Ok(forward_geometry("conv2d", x, w, b, p)?.out_dims().into())
}

/// Validates a conv2d forward call (dtypes, devices, sizes, the bias's shape).
fn forward_geometry(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
) -> Result<ConvGeom> {
    check_f32_same_device(op, &[x, w])?;
    if let Some(b) = b {
        check_f32_same_device(op, &[x, b])?;
    }
    let g = ConvGeom::new(op, x, w, p)?;
    if let Some(b) = b
        && b.dims() != [g.co]
    {
        return Err(CoreError::shape(
            op,
            format!("a bias of shape [{}] (one per output channel)", g.co),
            b.shape(),
        ));
    }
    Ok(g)
}

/// Validates a conv2d backward call (dtypes, devices, sizes, the output gradient's shape) and
/// returns its geometry.
pub(super) fn backward_geometry(
    op: &'static str,
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    p: &Conv2dParams,
) -> Result<ConvGeom> {
    check_f32_same_device(op, &[grad, x, w])?;
    let g = ConvGeom::new(op, x, w, p)?;
    check_grad_shape(op, grad, &g)?;
    Ok(g)
}

/// Checks that the output gradient `grad` has the output's shape of geometry `g`.
pub(super) fn check_grad_shape(op: &'static str, grad: &Tensor, g: &ConvGeom) -> Result<()> {
    if grad.dims() != g.out_dims() {
        return Err(CoreError::shape(
            op,
            format!(
                "a gradient of the output's shape {}",
                Shape::from(g.out_dims().to_vec())
            ),
            grad.shape(),
        ));
    }
    Ok(())
}

/// Images per time step of a batch of `b` folding `time_steps` steps.
pub(super) fn per_step(op: &'static str, b: usize, time_steps: usize) -> Result<usize> {
    if time_steps == 0 || !b.is_multiple_of(time_steps) {
        return Err(CoreError::invalid(
            op,
            format!("time_steps = {time_steps} must be >= 1 and divide the batch of {b}"),
        ));
    }
    Ok(b / time_steps)
}

/// Gradients of [`conv2d`]; each is `None` when it was not asked for.
#[derive(Debug, Clone)]
pub struct Conv2dGrads {
    /// Gradient of the input, `[B, C, H, W]`.
    pub x: Option<Tensor>,
    /// Gradient of the weight, `[Co, C / groups, kh, kw]`.
    pub w: Option<Tensor>,
    /// Gradient of the bias, `[Co]` (only with a bias).
    pub b: Option<Tensor>,
}

/// The arguments of [`conv2d_backward`].
#[derive(Debug, Clone, Copy)]
pub struct Conv2dBackward<'a> {
    /// Gradient of the output, `[B, Co, Ho, Wo]`.
    pub grad: &'a Tensor,
    /// The forward's input, `[B, C, H, W]`.
    pub x: &'a Tensor,
    /// The forward's weight, `[Co, C / groups, kh, kw]`.
    pub w: &'a Tensor,
    /// Whether the forward had a bias (only then is a bias gradient computed).
    pub has_bias: bool,
    /// The forward's stride, padding, dilation and groups.
    pub params: &'a Conv2dParams,
    /// The gradients wanted. With `acc`, only `needs.input` is consulted.
    pub needs: GradNeeds,
    /// `None`: the weight and bias gradients are new tensors. `Some`: the batch folds
    /// `acc.time_steps` time steps and the weight and bias gradients are added into the
    /// accumulators of `acc`, time step `T-1` first and `0` last (each step's images in order),
    /// so that recomputing the time steps in chunks, last chunk first, gives bit-identical
    /// results; the returned `w` and `b` are then `None`.
    pub acc: Option<WeightGradAcc<'a>>,
}

/// Backward of [`conv2d`]. Computes (and allocates, in the order x, w, b, as
/// [`MemoryKind::Gradient`]) only the gradients `args.needs` asks for, the bias gradient only
/// when `args.has_bias`; with `args.acc`, adds the weight and bias gradients into its
/// accumulators instead (see [`Conv2dBackward::acc`]). The im2col buffer (needed for the input
/// or weight gradient) is tracked as [`MemoryKind::Workspace`] and freed before returning.
pub fn conv2d_backward(args: Conv2dBackward<'_>) -> Result<Conv2dGrads> {
    let Conv2dBackward {
        grad,
        x,
        w,
        has_bias,
        params,
        needs,
        acc,
    } = args;
    if let Some(acc) = acc {
        let gx = accumulate::conv2d_backward_acc(grad, x, w, params, acc, needs.input)?;
        return Ok(Conv2dGrads {
            x: gx,
            w: None,
            b: None,
        });
    }
    whole_backward(grad, x, w, has_bias, params, needs)
}

/// [`conv2d_backward`] without accumulators.
fn whole_backward(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    has_bias: bool,
    p: &Conv2dParams,
    needs: GradNeeds,
) -> Result<Conv2dGrads> {
    const OP: &str = "conv2d_backward";
    let g = backward_geometry(OP, grad, x, w, p)?;
    let (gr, xr, wr) = (grad.read::<f32>(OP)?, x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let device = x.device();
    let alloc = |need: bool, len: usize, init: Init| {
        need.then(|| KernelBuffer::<f32>::new(OP, device, len, MemoryKind::Gradient, init))
            .transpose()
    };
    // col2im scatter-adds into the input gradient (an implicit convolution writes all of it);
    // the weight gradient is written by the first chunk's GEMM or accumulated by the implicit
    // GEMM, and stays zero for an empty batch.
    let input_conv = g.implicit() && implicit::input_grad_is_conv(&g.shape());
    let gx_init = if input_conv {
        Init::Overwritten
    } else {
        Init::Zeroed
    };
    let mut gx = alloc(needs.input, x.elem_count(), gx_init)?;
    let mut gw = alloc(needs.weight, w.elem_count(), Init::Zeroed)?;
    let mut gb = alloc(needs.bias && has_bias, g.co, Init::Overwritten)?;
    let mut ws = Workspace::for_backward(OP, device, &g, needs.input, needs.weight)?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    compute(device, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let bufs = ws.gpu_bufs(&mut gemm_ws)?;
            let grads = cuda::GpuGrads {
                gx: gx.as_mut().map(|b| b.cuda_ptr()).transpose()?,
                gw: gw.as_mut().map(|b| b.cuda_ptr()).transpose()?,
                gb: gb.as_mut().map(|b| b.cuda_ptr()).transpose()?,
                gw_accumulate: false,
                gb_accumulate: false,
            };
            let inputs = (gr.cuda_ptr()?, xr.cuda_ptr()?, wr.cuda_ptr()?);
            return cuda::backward(gpu, &g, inputs, &grads, &bufs);
        }
        let (gs, xs, wv) = (gr.host()?, xr.host()?, wr.host()?);
        let mut gx = gx.as_mut().map(|b| b.host_mut()).transpose()?;
        let mut gw = gw.as_mut().map(|b| b.host_mut()).transpose()?;
        if g.implicit() {
            let images: Vec<usize> = (0..g.b).collect();
            let grads = (gx.as_deref_mut(), gw.as_deref_mut());
            implicit_backward(&g, (gs, xs, wv), &mut ws, grads, g.b, &images)?;
            if let Some(gb) = gb.as_mut().map(|b| b.host_mut()).transpose()? {
                backward::bias_grad(&g, gs, gb);
            }
            return Ok(());
        }
        let (col, stage) = ws.slices()?;
        let bufs = backward::BackwardBufs {
            gx,
            gw,
            gb: gb.as_mut().map(|b| b.host_mut()).transpose()?,
            col,
            stage,
            accumulate: false,
        };
        backward::backward(&g, gs, xs, wv, bufs);
        Ok(())
    })?;
    drop(ws);
    Ok(Conv2dGrads {
        x: gx.map(|b| b.into_tensor(x.shape().clone())).transpose()?,
        w: gw.map(|b| b.into_tensor(w.shape().clone())).transpose()?,
        b: gb.map(|b| b.into_tensor([g.co])).transpose()?,
    })
}

/// The input and weight gradients of an implicit-GEMM call `g` on the CPU: the input gradient
/// (when `gx` is given) by [`implicit_input_grad`], the weight gradient added into `gw` over
/// the images `images` in that order (one chain per element, continued from `gw`'s value).
pub(super) fn implicit_backward(
    g: &ConvGeom,
    (grad, x, w): (&[f32], &[f32], &[f32]),
    ws: &mut Workspace,
    (gx, gw): (Option<&mut [f32]>, Option<&mut [f32]>),
    per_step: usize,
    images: &[usize],
) -> Result<()> {
    if let Some(gx) = gx {
        implicit_input_grad(g, grad, w, ws, gx, per_step)?;
    }
    if let Some(gw) = gw {
        implicit::weight_grad(CpuIsa::selected(), &g.shape(), grad, x, images, gw);
    }
    Ok(())
}

/// The input gradient `gx` (every element written) of an implicit-GEMM call `g` on the CPU,
/// which reads only the output gradient and the weight: a convolution of the output gradient
/// with the flipped weights (in `ws`) where it is one, otherwise im2col + GEMM + col2im in
/// `ws`'s chunks, each within one group of `per_step` images (`gx` arrives zeroed then). The
/// stepwise backward calls it as the dense one does, so both give the same bits.
pub(super) fn implicit_input_grad(
    g: &ConvGeom,
    grad: &[f32],
    w: &[f32],
    ws: &mut Workspace,
    gx: &mut [f32],
    per_step: usize,
) -> Result<()> {
    let s = g.shape();
    if implicit::input_grad_is_conv(&s) {
        let flip = ws.flip_mut()?;
        implicit::flip_weights(&s, w, flip);
        implicit::input_grad(CpuIsa::selected(), &s, grad, flip, gx);
        return Ok(());
    }
    let (col, stage) = ws.slices()?;
    // Images are grouped for im2col within one time step.
    let (in_len, out_len) = (g.c * g.in_pixels(), g.co * g.out_pixels());
    let step = per_step;
    let one_step = g.with_batch("conv2d_backward", step)?;
    for t in 0..g.b.checked_div(step).unwrap_or(0) {
        let bufs = backward::BackwardBufs {
            gx: Some(&mut gx[t * step * in_len..][..step * in_len]),
            gw: None,
            gb: None,
            col: &mut *col,
            stage: &mut *stage,
            accumulate: false,
        };
        // No weight gradient: the input is never read.
        backward::backward(
            &one_step,
            &grad[t * step * out_len..][..step * out_len],
            &[],
            w,
            bufs,
        );
    }
    Ok(())
}
