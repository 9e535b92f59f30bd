//! conv2d forward on the CPU: im2col of a chunk of images, one GEMM per group, and (for chunks
//! of several images) a copy from the staging buffer into the `[b, co, ho, wo]` output.

use super::for_each_product;
use super::im2col::im2col;
use super::params::ConvGeom;
use crate::kernels::matmul::{MatRef, gemm_f32};
use crate::kernels::par::PAR_THRESHOLD;
use rayon::prelude::*;

/// Buffers of one forward call: `out` is `[b, co, ho, wo]`, `col` and `stage` are the workspace
/// of [`ConvGeom::col_len`] and [`ConvGeom::stage_len`] elements.
pub(super) struct ForwardBufs<'a> {
    pub out: &'a mut [f32],
    pub col: &'a mut [f32],
    pub stage: &'a mut [f32],
}

/// Writes the bias of each row (`bias[row % bias.len()]`) into `dst` (rows of `len` elements).
fn fill_bias(dst: &mut [f32], len: usize, bias: &[f32]) {
    for (r, row) in dst.chunks_mut(len).enumerate() {
        row.fill(bias[r % bias.len()]);
    }
}

/// `out = conv2d(x, w) + bias`; `x`, `w`, `bias` are the input, weight and bias data.
pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], bias: Option<&[f32]>, bufs: ForwardBufs) {
    if g.b == 0 {
        return;
    }
    let (pix, k, cog) = (g.out_pixels(), g.k(), g.cog);
    let weight = |gi: usize| MatRef::row_major(&w[gi * cog * k..], cog, k);
    if g.pointwise() {
        // The input planes of group gi of image b are the [cg, h*w] column matrix itself.
        let macs = cog * pix * k;
        for_each_product(bufs.out, cog * pix, macs, |idx, dst, par| {
            let (b, gi) = (idx / g.groups, idx % g.groups);
            if let Some(bias) = bias {
                fill_bias(dst, pix, &bias[gi * cog..(gi + 1) * cog]);
            }
            let cols = MatRef::row_major(&x[(b * g.c + gi * g.cg) * pix..], g.cg, pix);
            gemm_f32(dst, pix, weight(gi), cols, bias.is_some(), par);
        });
        return;
    }
    let chunk = g.images_per_chunk();
    let in_len = g.c * g.in_pixels();
    for b0 in (0..g.b).step_by(chunk) {
        let n = chunk.min(g.b - b0);
        let ncols = n * pix;
        im2col(g, &x[b0 * in_len..(b0 + n) * in_len], n, bufs.col);
        let col = &*bufs.col;
        let cols = |gi: usize| MatRef::row_major(&col[gi * k * ncols..], k, ncols);
        let macs = cog * ncols * k;
        if chunk == 1 {
            // One image: each group's GEMM writes its rows of the output in place.
            let out = &mut bufs.out[b0 * g.co * pix..(b0 + 1) * g.co * pix];
            for_each_product(out, cog * pix, macs, |gi, dst, par| {
                if let Some(bias) = bias {
                    fill_bias(dst, pix, &bias[gi * cog..(gi + 1) * cog]);
                }
                gemm_f32(dst, pix, weight(gi), cols(gi), bias.is_some(), par);
            });
        } else {
            let stage = &mut bufs.stage[..g.co * ncols];
            for_each_product(stage, cog * ncols, macs, |gi, dst, par| {
                gemm_f32(dst, ncols, weight(gi), cols(gi), false, par);
            });
            let out = &mut bufs.out[b0 * g.co * pix..(b0 + n) * g.co * pix];
            unstage(g, stage, n, bias, out);
        }
    }
}

/// Copies the staging buffer `[co, n * pix]` into `out` (`[n, co, pix]`), adding the bias.
fn unstage(g: &ConvGeom, stage: &[f32], n: usize, bias: Option<&[f32]>, out: &mut [f32]) {
    let pix = g.out_pixels();
    let ncols = n * pix;
    let row = |(idx, dst): (usize, &mut [f32])| {
        let (img, c) = (idx / g.co, idx % g.co);
        let src = &stage[c * ncols + img * pix..][..pix];
        match bias {
            Some(bias) => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s + bias[c]),
            None => dst.copy_from_slice(src),
        }
    };
    if out.len() < PAR_THRESHOLD {
        out.chunks_mut(pix).enumerate().for_each(row);
    } else {
        out.par_chunks_mut(pix).enumerate().for_each(row);
    }
}
