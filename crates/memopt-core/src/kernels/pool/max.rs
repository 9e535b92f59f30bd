//! Max pooling and its backward.

use super::{Geom, Pool2dParams, window};
use crate::backend::{Compute, Init, compute};
use crate::cuda::launchers::pool as gpu_k;
use crate::cuda::{grid_for, read_back};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

/// Output columns updated together by [`update_row`].
const LANES: usize = 8;

/// For each output column `k`, PyTorch's update `if v > y || isnan(v) { y = v; i = pos }` with
/// `v = cols[k * stride]` and `pos = base + k * stride`. Columns are processed in blocks of
/// [`LANES`] with the update written over whole blocks, which compiles to vector compares and
/// blends: on real data the outcome is unpredictable, and a branch per element would mispredict.
/// A ragged end is covered by one more block ending at the last column: the update is
/// idempotent (re-applying it with the same value and position changes nothing).
fn update_row(y: &mut [f32], i: &mut [u32], cols: &[f32], stride: usize, base: u32) {
    let n = y.len();
    if n < LANES {
        for k in 0..n {
            let v = cols[k * stride];
            if v > y[k] || v.is_nan() {
                y[k] = v;
                i[k] = base + (k * stride) as u32;
            }
        }
        return;
    }
    let mut k0 = 0;
    loop {
        update_block(
            &mut y[k0..k0 + LANES],
            &mut i[k0..k0 + LANES],
            cols,
            stride,
            base,
            k0,
        );
        if k0 + LANES == n {
            break;
        }
        k0 = (k0 + LANES).min(n - LANES);
    }
}

/// [`update_row`] on columns `k0..k0 + LANES`.
#[inline(always)]
fn update_block(y: &mut [f32], i: &mut [u32], cols: &[f32], stride: usize, base: u32, k0: usize) {
    let seg = &cols[k0 * stride..(k0 + LANES - 1) * stride + 1];
    let mut v = [0f32; LANES];
    let mut take = [0u32; LANES];
    for j in 0..LANES {
        v[j] = seg[j * stride];
    }
    for j in 0..LANES {
        #[allow(clippy::eq_op)]
        let t = (v[j] > y[j]) | (v[j] != v[j]);
        take[j] = (t as u32).wrapping_neg();
    }
    for j in 0..LANES {
        y[j] = f32::from_bits((v[j].to_bits() & take[j]) | (y[j].to_bits() & !take[j]));
        let pos = base + ((k0 + j) * stride) as u32;
        i[j] = (pos & take[j]) | (i[j] & !take[j]);
    }
}

/// 2-D max pooling of `x` `[B, C, H, W]` (PyTorch semantics: floor mode, padding ignored, NaN
/// propagates, first maximum wins ties). Returns `(y, indices)`, both `[B, C, oh, ow]` and kind
/// Activation: `indices` are u32 positions `h * W + w` of each maximum within its input plane;
/// `y` keeps the input's spike flag.
pub fn max_pool2d(x: &Tensor, p: &Pool2dParams) -> Result<(Tensor, Tensor)> {
    const OP: &str = "max_pool2d";
    let g = Geom::pooled(OP, x.dims(), p)?;
    if g.in_plane() > u32::MAX as usize + 1 {
        return Err(CoreError::invalid(
            OP,
            format!("planes of {}x{} elements do not fit u32 indices", g.h, g.w),
        ));
    }
    let xr = x.read::<f32>(OP)?;
    let n = g.b * g.c * g.out_plane();
    let mut y = KernelBuffer::<f32>::new(OP, x.device(), n, MemoryKind::Activation, Init::Overwritten)?;
    let mut idx = KernelBuffer::<u32>::new(OP, x.device(), n, MemoryKind::Activation, Init::Overwritten)?;
    compute(x.device(), |backend| {
        if n == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let (xp, yp, ip) = (xr.cuda_ptr()?, y.cuda_ptr()?, idx.cuda_ptr()?);
            return gpu_k::max_pool2d(gpu, grid_for(n as u64), xp, g.cuda(p), yp, ip);
        }
        let (xs, ys, is) = (xr.host()?, y.host_mut()?, idx.host_mut()?);
        let ([kh, kw], [sh, sw], [ph, pw]) = (p.kernel, p.stride, p.padding);
        ys.par_chunks_mut(g.out_plane())
            .zip(is.par_chunks_mut(g.out_plane()))
            .enumerate()
            .with_min_len(g.min_planes())
            .for_each(|(plane, (yp, ip))| {
                let xp = &xs[plane * g.in_plane()..(plane + 1) * g.in_plane()];
                for oy in 0..g.oh {
                    let (h0, h1, _) = window(oy, kh, sh, ph, g.h);
                    let yrow = &mut yp[oy * g.ow..(oy + 1) * g.ow];
                    let irow = &mut ip[oy * g.ow..(oy + 1) * g.ow];
                    // Start from -inf at the window's first in-bounds position (PyTorch's
                    // initial index), then visit the window in row-major order, one window
                    // element at a time across the whole output row: the output columns are
                    // independent, so the compare-and-select chains run side by side.
                    for (ox, (y, i)) in yrow.iter_mut().zip(irow.iter_mut()).enumerate() {
                        *y = f32::NEG_INFINITY;
                        // Positions are < H*W, checked above to fit u32.
                        *i = (h0 * g.w + window(ox, kw, sw, pw, g.w).0) as u32;
                    }
                    for hh in h0..h1 {
                        let xrow = &xp[hh * g.w..(hh + 1) * g.w];
                        for dx in 0..kw {
                            // Output columns whose window column `ox*sw + dx - pw` is in bounds.
                            let lo = pw.saturating_sub(dx).div_ceil(sw);
                            let hi = ((g.w + pw).saturating_sub(dx)).div_ceil(sw).min(g.ow);
                            if lo >= hi {
                                continue;
                            }
                            let first = lo * sw + dx - pw;
                            let n = hi - lo;
                            let cols = &xrow[first..first + (n - 1) * sw + 1];
                            let base = (hh * g.w + first) as u32;
                            let (yr, ir) = (&mut yrow[lo..hi], &mut irow[lo..hi]);
                            update_row(yr, ir, cols, sw, base);
                        }
                    }
                }
            });
        Ok(())
    })?;
    let dims = g.out_dims();
    Ok((
        y.into_tensor(dims)?.with_spike_flag(x.is_spike()),
        idx.into_tensor(dims)?,
    ))
}

/// Backward of [`max_pool2d`]: each gradient goes to the position its index names within its
/// plane (gradients of overlapping windows that share a maximum add up). `input_dims` is
/// `[B, C, H, W]` of the pooled input; an index outside `0..H*W` is an error (checked on the
/// CPU). Output `[B, C, H, W]`, kind Gradient.
pub fn max_pool2d_backward(grad_y: &Tensor, indices: &Tensor, input_dims: &[usize]) -> Result<Tensor> {
    const OP: &str = "max_pool2d_backward";
    let g = Geom::input(OP, input_dims)?;
    grad_y.expect_same_device(OP, indices)?;
    match *grad_y.dims() {
        [b, c, _, _] if b == g.b && c == g.c => {}
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
    }
    if indices.shape() != grad_y.shape() {
        return Err(CoreError::shape(
            OP,
            format!("indices of grad_y's shape {}", grad_y.shape()),
            indices.shape(),
        ));
    }
    let (gr, ir) = (grad_y.read::<f32>(OP)?, indices.read::<u32>(OP)?);
    let in_plane = g.in_plane();
    let bad = |is: &[u32], base: usize| match is.iter().position(|&i| i as usize >= in_plane) {
        Some(pos) => Err(CoreError::invalid(
            OP,
            format!(
                "index {} at position {} is outside the input plane of {}x{} (valid: 0..{in_plane})",
                is[pos],
                base + pos,
                g.h,
                g.w
            ),
        )),
        None => Ok(()),
    };
    compute(indices.device(), |backend| match backend {
        Compute::Cpu => bad(ir.host()?, 0),
        // A bad index would write outside the gradient on the GPU: the indices come back to
        // the host in bounded chunks (untracked, at most CHECK_CHUNK values) and are checked
        // before the kernel runs.
        Compute::Cuda(gpu) => {
            const CHECK_CHUNK: usize = 1 << 20;
            let (base, total) = (ir.cuda_ptr()?, indices.elem_count());
            for start in (0..total).step_by(CHECK_CHUNK) {
                let len = CHECK_CHUNK.min(total - start);
                bad(&read_back::<u32>(gpu, base.offset(start, 4), len)?, start)?;
            }
            Ok(())
        }
    })?;
    let out_plane = grad_y.dims()[2] * grad_y.dims()[3];
    let mut gx = KernelBuffer::<f32>::new(
        OP,
        grad_y.device(),
        g.b * g.c * in_plane,
        MemoryKind::Gradient,
        Init::Zeroed,
    )?;
    compute(grad_y.device(), |backend| {
        if out_plane == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let planes = (g.b * g.c) as u64;
            let (gp, ip, xp) = (gr.cuda_ptr()?, ir.cuda_ptr()?, gx.cuda_ptr()?);
            return match planes {
                0 => Ok(()),
                // One thread per plane: overlapping windows add in output order, as the CPU.
                _ => gpu_k::max_pool2d_backward(
                    gpu,
                    grid_for(planes),
                    gp,
                    ip,
                    planes,
                    in_plane as u64,
                    out_plane as u64,
                    xp,
                ),
            };
        }
        let (gs, is, out) = (gr.host()?, ir.host()?, gx.host_mut()?);
        out.par_chunks_mut(in_plane)
            .zip(gs.par_chunks(out_plane).zip(is.par_chunks(out_plane)))
            .with_min_len(g.min_planes())
            .for_each(|(o, (gp, ip))| {
                for (&v, &i) in gp.iter().zip(ip) {
                    o[i as usize] += v;
                }
            });
        Ok(())
    })?;
    gx.into_tensor(g.in_dims())
}
