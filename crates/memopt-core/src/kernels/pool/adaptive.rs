//! Adaptive average pooling and its backward.

use super::Geom;
use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::pool as gpu_k;
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

/// PyTorch's adaptive window of output `i` of `out` over an axis of `n`:
/// `floor(i * n / out)..ceil((i + 1) * n / out)`.
#[inline]
fn adaptive_window(i: usize, n: usize, out: usize) -> (usize, usize) {
    (i * n / out, ((i + 1) * n).div_ceil(out))
}

fn check_out(op: &'static str, out_hw: [usize; 2]) -> Result<()> {
    if out_hw[0] == 0 || out_hw[1] == 0 {
        return Err(CoreError::invalid(
            op,
            format!(
                "the output size must be at least 1x1, got {}x{}",
                out_hw[0], out_hw[1]
            ),
        ));
    }
    Ok(())
}

/// Adaptive 2-D average pooling of `x` `[B, C, H, W]` to `[B, C, oh, ow]` with PyTorch's windows
/// (rows `floor(i*H/oh)..ceil((i+1)*H/oh)`, likewise for columns; windows may overlap).
/// Window sums in f64. Kind Activation.
pub fn adaptive_avg_pool2d(x: &Tensor, out_hw: [usize; 2]) -> Result<Tensor> {
    const OP: &str = "adaptive_avg_pool2d";
    let g = Geom::input(OP, x.dims())?;
    check_out(OP, out_hw)?;
    let g = Geom {
        oh: out_hw[0],
        ow: out_hw[1],
        ..g
    };
    let xr = x.read::<f32>(OP)?;
    let n = g.b * g.c * g.out_plane();
    let mut y = KernelBuffer::<f32>::new(OP, x.device(), n, MemoryKind::Activation, Init::Overwritten)?;
    compute(x.device(), |backend| {
        if n == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let [planes, h, w, oh, ow] = [g.b * g.c, g.h, g.w, g.oh, g.ow].map(|v| v as u64);
            let (xp, yp) = (xr.cuda_ptr()?, y.cuda_ptr()?);
            return gpu_k::adaptive_avg_pool2d(gpu, grid_for(n as u64), xp, planes, h, w, oh, ow, yp);
        }
        let (xs, ys) = (xr.host()?, y.host_mut()?);
        ys.par_chunks_mut(g.out_plane())
            .enumerate()
            .with_min_len(g.min_planes())
            .for_each(|(plane, yp)| {
                let xp = &xs[plane * g.in_plane()..(plane + 1) * g.in_plane()];
                for oy in 0..g.oh {
                    let (h0, h1) = adaptive_window(oy, g.h, g.oh);
                    for ox in 0..g.ow {
                        let (w0, w1) = adaptive_window(ox, g.w, g.ow);
                        let mut sum = 0f64;
                        for hh in h0..h1 {
                            sum += xp[hh * g.w + w0..hh * g.w + w1]
                                .iter()
                                .map(|&v| v as f64)
                                .sum::<f64>();
                        }
                        yp[oy * g.ow + ox] = (sum / ((h1 - h0) * (w1 - w0)) as f64) as f32;
                    }
                }
            });
        Ok(())
    })?;
    y.into_tensor(g.out_dims())
}

/// Backward of [`adaptive_avg_pool2d`]: each output gradient divided by its window's area is
/// added to the window's inputs. `input_dims` is `[B, C, H, W]` of the pooled input; the output
/// size comes from `grad_y` `[B, C, oh, ow]`. Output `[B, C, H, W]`, kind Gradient.
pub fn adaptive_avg_pool2d_backward(grad_y: &Tensor, input_dims: &[usize]) -> Result<Tensor> {
    const OP: &str = "adaptive_avg_pool2d_backward";
    let g = Geom::input(OP, input_dims)?;
    let [oh, ow] = match *grad_y.dims() {
        [b, c, oh, ow] if b == g.b && c == g.c => [oh, ow],
        _ => {
            return Err(CoreError::shape(
                OP,
                format!(
                    "grad_y of shape [{}, {}, oh, ow] (the pooled input has shape {:?})",
                    g.b, g.c, input_dims
                ),
                grad_y.shape(),
            ));
        }
    };
    check_out(OP, [oh, ow])?;
    let g = Geom { oh, ow, ..g };
    let gr = grad_y.read::<f32>(OP)?;
    let mut gx = KernelBuffer::<f32>::new(
        OP,
        grad_y.device(),
        g.b * g.c * g.in_plane(),
        MemoryKind::Gradient,
        Init::Zeroed,
    )?;
    compute(grad_y.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let n = (g.b * g.c * g.in_plane()) as u64;
            let [planes, h, w, oh, ow] = [g.b * g.c, g.h, g.w, g.oh, g.ow].map(|v| v as u64);
            let (gp, xp) = (gr.cuda_ptr()?, gx.cuda_ptr()?);
            return match n {
                0 => Ok(()),
                _ => gpu_k::adaptive_avg_pool2d_backward(gpu, grid_for(n), gp, planes, h, w, oh, ow, xp),
            };
        }
        let (gs, out) = (gr.host()?, gx.host_mut()?);
        out.par_chunks_mut(g.in_plane())
            .zip(gs.par_chunks(g.out_plane()))
            .with_min_len(g.min_planes())
            .for_each(|(o, gp)| {
                for oy in 0..g.oh {
                    let (h0, h1) = adaptive_window(oy, g.h, g.oh);
                    for ox in 0..g.ow {
                        let (w0, w1) = adaptive_window(ox, g.w, g.ow);
                        let v = (gp[oy * g.ow + ox] as f64 / ((h1 - h0) * (w1 - w0)) as f64) as f32;
                        for hh in h0..h1 {
                            o[hh * g.w + w0..hh * g.w + w1].iter_mut().for_each(|d| *d += v);
                        }
                    }
                }
            });
        Ok(())
    })?;
    gx.into_tensor(g.in_dims())
}
