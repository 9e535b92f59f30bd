//! Average pooling and its backward.

use super::{Geom, Pool2dParams, window};
use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::pool as gpu_k;
use crate::memory::MemoryKind;
use crate::{KernelBuffer, KnownValues, Result, Tensor};
use rayon::prelude::*;

/// The divisor of a window: its length clipped to the padded input when padding counts, else
/// the number of in-bounds elements (PyTorch's `count_include_pad`).
#[inline]
fn divisor(h: (usize, usize, usize), w: (usize, usize, usize), count_include_pad: bool) -> f64 {
    if count_include_pad {
        (h.2 * w.2) as f64
    } else {
        ((h.1 - h.0) * (w.1 - w.0)) as f64
    }
}

/// 2-D average pooling of `x` `[B, C, H, W]` (PyTorch semantics: floor mode; padded zeros count
/// in the divisor when `count_include_pad`). Window sums in f64. Output `[B, C, oh, ow]`, kind
/// Activation; of f32 spikes without padding, known to be pooled spikes
/// ([`KnownValues::PooledSpikes`], exactly compressible).
pub fn avg_pool2d(x: &Tensor, p: &Pool2dParams, count_include_pad: bool) -> Result<Tensor> {
    const OP: &str = "avg_pool2d";
    let g = Geom::pooled(OP, x.dims(), p)?;
    let xr = x.read::<f32>(OP)?;
    let n = g.b * g.c * g.out_plane();
    let mut y = KernelBuffer::<f32>::new(OP, x.device(), n, MemoryKind::Activation, Init::Overwritten)?;
    compute(x.device(), |backend| {
        if n == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let (xp, yp, pad) = (xr.cuda_ptr()?, y.cuda_ptr()?, count_include_pad as i32);
            return gpu_k::avg_pool2d(gpu, grid_for(n as u64), xp, g.cuda(p), pad, yp);
        }
        let (xs, ys) = (xr.host()?, y.host_mut()?);
        let ([kh, kw], [sh, sw], [ph, pw]) = (p.kernel, p.stride, p.padding);
        let pairs = is_pairs(p);
        ys.par_chunks_mut(g.out_plane())
            .enumerate()
            .with_min_len(g.min_planes())
            .for_each(|(plane, yp)| {
                let xp = &xs[plane * g.in_plane()..(plane + 1) * g.in_plane()];
                if pairs {
                    return pairs_forward(&g, xp, yp);
                }
                for oy in 0..g.oh {
                    let wh = window(oy, kh, sh, ph, g.h);
                    for ox in 0..g.ow {
                        let ww = window(ox, kw, sw, pw, g.w);
                        let mut sum = 0f64;
                        for hh in wh.0..wh.1 {
                            sum += xp[hh * g.w + ww.0..hh * g.w + ww.1]
                                .iter()
                                .map(|&v| v as f64)
                                .sum::<f64>();
                        }
                        yp[oy * g.ow + ox] = (sum / divisor(wh, ww, count_include_pad)) as f32;
                    }
                }
            });
        Ok(())
    })?;
    let y = y.into_tensor(g.out_dims())?;
    Ok(match pooled_spike_window(x, p) {
        Some(window) => y.with_known_values(KnownValues::PooledSpikes { window }),
        None => y,
    })
}

/// The window whose spikes each output of [`avg_pool2d`] averages, when the output is
/// [`KnownValues::PooledSpikes`]: f32 spikes in, no padding (every window holds `kh * kw`
/// inputs, so every divisor is that), and at most 255 inputs per window.
fn pooled_spike_window(x: &Tensor, p: &Pool2dParams) -> Option<u16> {
    let window = p.kernel[0].checked_mul(p.kernel[1])?;
    let exact = x.is_spike() && x.dtype() == crate::DType::F32 && p.padding == [0, 0];
    (exact && (1..=255).contains(&window)).then_some(window as u16)
}

/// Backward of [`avg_pool2d`]: each output gradient, divided by its window's divisor, is added to
/// every in-bounds input of the window. `input_dims` is `[B, C, H, W]` of the pooled input and
/// `grad_y` must have the pooled shape. Output `[B, C, H, W]`, kind Gradient.
pub fn avg_pool2d_backward(
    grad_y: &Tensor,
    input_dims: &[usize],
    p: &Pool2dParams,
    count_include_pad: bool,
) -> Result<Tensor> {
    const OP: &str = "avg_pool2d_backward";
    let g = Geom::pooled(OP, input_dims, p)?;
    g.expect_out(OP, grad_y)?;
    let gr = grad_y.read::<f32>(OP)?;
    let mut gx = KernelBuffer::<f32>::new(
        OP,
        grad_y.device(),
        g.b * g.c * g.in_plane(),
        MemoryKind::Gradient,
        Init::Zeroed,
    )?;
    compute(grad_y.device(), |backend| {
        let n = g.b * g.c * g.in_plane();
        if g.out_plane() == 0 || n == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            // One thread per input value, gathering its windows in output order.
            let (gp, xp, pad) = (gr.cuda_ptr()?, gx.cuda_ptr()?, count_include_pad as i32);
            return gpu_k::avg_pool2d_backward(gpu, grid_for(n as u64), gp, g.cuda(p), pad, xp);
        }
        let (gs, out) = (gr.host()?, gx.host_mut()?);
        let ([kh, kw], [sh, sw], [ph, pw]) = (p.kernel, p.stride, p.padding);
        let pairs = is_pairs(p);
        out.par_chunks_mut(g.in_plane())
            .zip(gs.par_chunks(g.out_plane()))
            .with_min_len(g.min_planes())
            .for_each(|(o, gp)| {
                if pairs {
                    return pairs_backward(&g, gp, o);
                }
                for oy in 0..g.oh {
                    let wh = window(oy, kh, sh, ph, g.h);
                    for ox in 0..g.ow {
                        let ww = window(ox, kw, sw, pw, g.w);
                        let v = (gp[oy * g.ow + ox] as f64 / divisor(wh, ww, count_include_pad)) as f32;
                        for hh in wh.0..wh.1 {
                            o[hh * g.w + ww.0..hh * g.w + ww.1]
                                .iter_mut()
                                .for_each(|d| *d += v);
                        }
                    }
                }
            });
        Ok(())
    })?;
    gx.into_tensor(g.in_dims())
}

/// Whether `p` pools 2x2 windows side by side (kernel 2, stride 2, no padding): every window
/// lies inside the input, so its divisor is 4 whatever `count_include_pad` says.
fn is_pairs(p: &Pool2dParams) -> bool {
    p.kernel == [2, 2] && p.stride == [2, 2] && p.padding == [0, 0]
}

/// [`avg_pool2d`] of one plane for [`is_pairs`] windows, in the general loop's order: the sum
/// starts from 0, each window row is summed, then added.
fn pairs_forward(g: &Geom, xp: &[f32], yp: &mut [f32]) {
    for (oy, yr) in yp.chunks_exact_mut(g.ow).enumerate() {
        let r0 = &xp[2 * oy * g.w..][..2 * g.ow];
        let r1 = &xp[(2 * oy + 1) * g.w..][..2 * g.ow];
        for ((y, a), b) in yr.iter_mut().zip(r0.chunks_exact(2)).zip(r1.chunks_exact(2)) {
            let top = a[0] as f64 + a[1] as f64;
            let bottom = b[0] as f64 + b[1] as f64;
            *y = ((0.0 + top + bottom) / 4.0) as f32;
        }
    }
}

/// [`avg_pool2d_backward`] of one plane for [`is_pairs`] windows: each gradient, divided by 4,
/// added to the four (zeroed) inputs of its window, which no other window reaches.
fn pairs_backward(g: &Geom, gp: &[f32], o: &mut [f32]) {
    for (oy, gr) in gp.chunks_exact(g.ow).enumerate() {
        let (top, bottom) = o[2 * oy * g.w..][..2 * g.w].split_at_mut(g.w);
        let rows = top[..2 * g.ow]
            .chunks_exact_mut(2)
            .zip(bottom[..2 * g.ow].chunks_exact_mut(2));
        for (&v, (t, b)) in gr.iter().zip(rows) {
            let v = (v as f64 / 4.0) as f32;
            t.iter_mut().chain(b.iter_mut()).for_each(|d| *d += v);
        }
    }
}
