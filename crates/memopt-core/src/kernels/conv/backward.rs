//! conv2d backward on the CPU. Per chunk of images: the weight gradient accumulates
//! `grad x columns^T` (a GEMM that reads its destination), the input gradient is
//! `W^T x grad` into the column buffer followed by col2im (scatter-add); the bias gradient is a
//! sum over images and pixels.

use super::for_each_product;
use super::im2col::{col2im, im2col};
use super::params::ConvGeom;
use crate::kernels::matmul::{MatRef, gemm_f32};
use crate::kernels::par::PAR_THRESHOLD;
use rayon::prelude::*;

/// Buffers of one backward call; a gradient is `None` when it is not wanted. `col` and `stage`
/// are the workspace of [`ConvGeom::col_len`] and [`ConvGeom::stage_len`] elements (empty when
/// neither the input nor the weight gradient is wanted).
pub(super) struct BackwardBufs<'a> {
    pub gx: Option<&'a mut [f32]>,
    pub gw: Option<&'a mut [f32]>,
    pub gb: Option<&'a mut [f32]>,
    pub col: &'a mut [f32],
    pub stage: &'a mut [f32],
    /// Whether `gw` already holds a sum to add to (it is overwritten otherwise).
    pub accumulate: bool,
}

/// Gradients of conv2d given the output gradient `grad` and the forward's `x` and `w`. The
/// gradient buffers arrive zeroed.
pub(super) fn backward(g: &ConvGeom, grad: &[f32], x: &[f32], w: &[f32], bufs: BackwardBufs) {
    let BackwardBufs {
        mut gx,
        mut gw,
        gb,
        col,
        stage,
        accumulate,
    } = bufs;
    if let Some(gb) = gb {
        bias_grad(g, grad, gb);
    }
    if g.b == 0 || (gx.is_none() && gw.is_none()) {
        return;
    }
    let (pix, k, cog) = (g.out_pixels(), g.k(), g.cog);
    let weight = |gi: usize| MatRef::row_major(&w[gi * cog * k..], cog, k);
    if g.pointwise() {
        // The input planes of a group are the [cg, h*w] column matrix itself.
        let in_len = g.c * pix;
        let out_len = g.co * pix;
        if let Some(gw) = gw {
            for_each_product(gw, cog * k, cog * k * pix, |gi, dst, par| {
                for b in 0..g.b {
                    let gr = MatRef::row_major(&grad[b * out_len + gi * cog * pix..], cog, pix);
                    let xs = MatRef::row_major(&x[b * in_len + gi * k * pix..], k, pix);
                    gemm_f32(dst, k, gr, xs.t(), accumulate || b > 0, par);
                }
            });
        }
        if let Some(gx) = gx {
            for_each_product(gx, k * pix, k * pix * cog, |idx, dst, par| {
                let (b, gi) = (idx / g.groups, idx % g.groups);
                let gr = MatRef::row_major(&grad[b * out_len + gi * cog * pix..], cog, pix);
                gemm_f32(dst, pix, weight(gi).t(), gr, false, par);
            });
        }
        return;
    }
    let chunk = g.images_per_chunk();
    let (in_len, out_len) = (g.c * g.in_pixels(), g.co * pix);
    for b0 in (0..g.b).step_by(chunk) {
        let n = chunk.min(g.b - b0);
        let ncols = n * pix;
        let grad_chunk = &grad[b0 * out_len..(b0 + n) * out_len];
        // The output gradient of the chunk as a [co, n * pix] matrix: in place for one image,
        // gathered into the staging buffer for several.
        let src: &[f32] = if chunk == 1 {
            grad_chunk
        } else {
            stage_grad(g, grad_chunk, n, &mut stage[..g.co * ncols]);
            &stage[..g.co * ncols]
        };
        let gsrc = |gi: usize| MatRef::row_major(&src[gi * cog * ncols..], cog, ncols);
        let col = &mut col[..g.c * g.kh * g.kw * ncols];
        if let Some(gw) = gw.as_deref_mut() {
            im2col(g, &x[b0 * in_len..(b0 + n) * in_len], n, col);
            let col = &*col;
            for_each_product(gw, cog * k, cog * k * ncols, |gi, dst, par| {
                let cols = MatRef::row_major(&col[gi * k * ncols..], k, ncols);
                gemm_f32(dst, k, gsrc(gi), cols.t(), accumulate || b0 > 0, par);
            });
        }
        if let Some(gx) = gx.as_deref_mut() {
            for_each_product(col, k * ncols, k * ncols * cog, |gi, dst, par| {
                gemm_f32(dst, ncols, weight(gi).t(), gsrc(gi), false, par);
            });
            col2im(g, col, n, &mut gx[b0 * in_len..(b0 + n) * in_len]);
        }
    }
}

/// Copies the output gradient of `n` images (`[n, co, pix]`) into `stage` as `[co, n * pix]`.
fn stage_grad(g: &ConvGeom, grad: &[f32], n: usize, stage: &mut [f32]) {
    let pix = g.out_pixels();
    let row = |(c, dst): (usize, &mut [f32])| {
        for (img, d) in dst.chunks_exact_mut(pix).enumerate() {
            d.copy_from_slice(&grad[(img * g.co + c) * pix..][..pix]);
        }
    };
    if stage.len() < PAR_THRESHOLD {
        stage.chunks_mut(n * pix).enumerate().for_each(row);
    } else {
        stage.par_chunks_mut(n * pix).enumerate().for_each(row);
    }
}

/// `gb[c] = sum over images and pixels of grad[.., c, ..]`, accumulated in f64 in a fixed order.
pub(super) fn bias_grad(g: &ConvGeom, grad: &[f32], gb: &mut [f32]) {
    let pix = g.out_pixels();
    let one = |(c, o): (usize, &mut f32)| {
        let mut acc = 0f64;
        for b in 0..g.b {
            let plane = &grad[(b * g.co + c) * pix..][..pix];
            acc += plane.iter().map(|&v| v as f64).sum::<f64>();
        }
        *o = acc as f32;
    };
    if g.out_len() < PAR_THRESHOLD {
        gb.iter_mut().enumerate().for_each(one);
    } else {
        gb.par_iter_mut().enumerate().for_each(one);
    }
}
