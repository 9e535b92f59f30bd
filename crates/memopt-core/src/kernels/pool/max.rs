//! Max pooling and its backward.

use super::{Geom, Pool2dParams, window};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

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
    let mut y = KernelBuffer::<f32>::zeros(OP, x.device(), n, MemoryKind::Activation)?;
    let mut idx = KernelBuffer::<u32>::zeros(OP, x.device(), n, MemoryKind::Activation)?;
    if let (Some(xs), Some(ys), Some(is), true) = (xr.slice(), y.slice_mut(), idx.slice_mut(), n > 0) {
        let ([kh, kw], [sh, sw], [ph, pw]) = (p.kernel, p.stride, p.padding);
        ys.par_chunks_mut(g.out_plane())
            .zip(is.par_chunks_mut(g.out_plane()))
            .enumerate()
            .with_min_len(g.min_planes())
            .for_each(|(plane, (yp, ip))| {
                let xp = &xs[plane * g.in_plane()..(plane + 1) * g.in_plane()];
                for oy in 0..g.oh {
                    let (h0, h1, _) = window(oy, kh, sh, ph, g.h);
                    for ox in 0..g.ow {
                        let (w0, w1, _) = window(ox, kw, sw, pw, g.w);
                        let mut best = f32::NEG_INFINITY;
                        let mut best_i = h0 * g.w + w0;
                        for hh in h0..h1 {
                            let row = hh * g.w;
                            for (i, &v) in xp[row + w0..row + w1].iter().enumerate() {
                                if v > best || v.is_nan() {
                                    best = v;
                                    best_i = row + w0 + i;
                                }
                            }
                        }
                        yp[oy * g.ow + ox] = best;
                        // In range: best_i < H*W, checked above to fit u32.
                        ip[oy * g.ow + ox] = best_i as u32;
                    }
                }
            });
    }
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
    if let Some(is) = ir.slice() {
        if let Some(pos) = is.iter().position(|&i| i as usize >= in_plane) {
            return Err(CoreError::invalid(
                OP,
                format!(
                    "index {} at position {pos} is outside the input plane of {}x{} (valid: 0..{in_plane})",
                    is[pos], g.h, g.w
                ),
            ));
        }
    }
    let out_plane = grad_y.dims()[2] * grad_y.dims()[3];
    let mut gx = KernelBuffer::<f32>::zeros(OP, grad_y.device(), g.b * g.c * in_plane, MemoryKind::Gradient)?;
    if let (Some(gs), Some(is), Some(out), true) = (gr.slice(), ir.slice(), gx.slice_mut(), out_plane > 0) {
        out.par_chunks_mut(in_plane)
            .zip(gs.par_chunks(out_plane).zip(is.par_chunks(out_plane)))
            .with_min_len(g.min_planes())
            .for_each(|(o, (gp, ip))| {
                for (&v, &i) in gp.iter().zip(ip) {
                    o[i as usize] += v;
                }
            });
    }
    gx.into_tensor(g.in_dims())
}
