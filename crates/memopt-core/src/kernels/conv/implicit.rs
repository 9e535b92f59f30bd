//! conv2d on the CPU as an implicit GEMM (one group): the columns im2col would write are packed
//! straight from the images into small thread-local panels, at most `KC` inner indices (split
//! evenly, so that no block is short) by `NC` columns, and multiplied by [`TileKernel`] tiles
//! of `MR` rows by `NR` columns, the tiles of a column panel stacked in one kernel call.
//!
//! - forward: `out[co, col] = bias[co] + sum_k w[co, k] x col[k]`, the chain over `k` in order;
//! - weight gradient: `dw[co, k] += sum over pixels of grad[co, pixel] x col[k, pixel]`, the
//!   chain over the pixels of the images in the order given (a time-folded batch passes its
//!   time steps last first), continued straight from the accumulator's value;
//! - input gradient (stride 1, dilation 1, padding below the kernel): a forward convolution of
//!   the output gradient with the weights flipped and transposed (`[c, co, kh, kw]`) and padding
//!   `k - 1 - p`.
//!
//! Every output element is one chain of fused multiply-adds computed by one task, so the result
//! depends on neither the task partition, the thread count nor how the time steps of a batch
//! are grouped into calls; tasks are split to keep every thread busy.

use super::pack::{ConvShape, PanelCols, PixelRun, pack_columns, pack_taps};
use super::pack_simd::{ColumnTable, TapOffsets};
use crate::cpu_isa::CpuIsa;
use crate::kernels::tile::blocking::{
    KC, MC, NC, Shared, even_blocks, panel_rows, row_groups, run_owned_tiles, run_tasks, with_panel,
    with_rows,
};
use crate::kernels::tile::{MR, NR, Panels, Start, Tile, TileKernel};
use rayon::prelude::*;

/// Where the tile columns `j0..j0 + NR` of a forward call land in `[b, co, ho, wo]`.
#[derive(Clone, Copy)]
struct TileCols {
    /// Output offset of column 0 in channel 0.
    first: usize,
    /// Whether all `NR` columns are valid and consecutive in one image.
    contiguous: bool,
    /// The valid columns as runs inside one image: `(first column, columns, output offset in
    /// channel 0)`, `count` of them.
    runs: [(usize, usize, usize); NR],
    count: usize,
}

impl TileCols {
    fn new(s: &ConvShape, j0: usize) -> Self {
        let (pix, ncols) = (s.pix(), s.b * s.pix());
        let valid = (ncols - j0).min(NR);
        let mut runs = [(0, 0, 0); NR];
        let (mut count, mut jj) = (0, 0);
        while jj < valid {
            let j = j0 + jj;
            let len = (pix - j % pix).min(valid - jj);
            runs[count] = (jj, len, (j / pix) * s.co * pix + j % pix);
            count += 1;
            jj += len;
        }
        TileCols {
            first: runs[0].2,
            contiguous: valid == NR && count == 1,
            runs,
            count,
        }
    }

    /// The runs of valid columns.
    fn runs(&self) -> &[(usize, usize, usize)] {
        &self.runs[..self.count]
    }
}

/// `out = conv(x, w) + bias` for the images `x` (`[b, c, h, w]`), `w` as a row-major
/// `co x (c * kh * kw)` matrix, `out` `[b, co, ho, wo]`, every element written.
pub(super) fn forward(
    isa: CpuIsa,
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (k, pix) = (s.k(), s.pix());
    let ncols = s.b * pix;
    if ncols == 0 || s.co == 0 {
        return;
    }
    assert!(
        x.len() >= s.b * s.in_len() && w.len() >= s.co * k && out.len() >= s.co * ncols,
        "conv forward operands shorter than the shape"
    );
    let kernel = TileKernel::for_isa(isa).unwrap_or_else(TileKernel::portable);
    let mc = kernel.panels_per_group();
    let panels = s.co.div_ceil(MR);
    let col_blocks = ncols.div_ceil(NC);
    let groups = row_groups(panels, col_blocks);
    let tasks: Vec<(usize, (usize, usize))> = (0..col_blocks)
        .flat_map(|cb| groups.iter().map(move |&g| (cb, g)))
        .collect();
    let out = Shared::new(out);
    let kc_max = even_blocks(k).1;
    run_tasks(&tasks, s.co * k * ncols, |&(cb, (p0, p1))| {
        let c0 = cb * NC;
        let micro = (ncols - c0).min(NC).div_ceil(NR);
        let cols: Vec<(TileCols, PanelCols)> = (0..micro)
            .map(|m| (TileCols::new(s, c0 + m * NR), PanelCols::new(s, c0 + m * NR)))
            .collect();
        let table = ColumnTable::new(isa, s, cols.iter().map(|(_, pc)| pc));
        // Panels p0..full hold MR rows each; a last partial panel goes through a tile copy.
        let full = p1.min(s.co / MR).max(p0);
        // Staging tiles of up to MC panels over two micro-panels (on the stack: 24 KiB).
        let mut stage = [0f32; MC * MR * 2 * NR];
        with_panel(|panel| {
            for k0 in (0..k).step_by(kc_max) {
                let kc = kc_max.min(k - k0);
                for (m, (_, pc)) in cols.iter().enumerate() {
                    let dst = &mut panel[m * KC * NR..];
                    match &table {
                        Some(t) => t.pack(s, x, m, k0, kc, dst),
                        None => pack_columns(s, x, pc, k0, kc, dst),
                    }
                }
                for pb in (p0..p1).step_by(mc) {
                    let pe = (pb + mc).min(p1);
                    let (fb, fe) = (pb.min(full), pe.min(full));
                    let b = |m: usize| &panel[m * KC * NR..][..kc * NR];
                    let starts = |i: usize| match (k0, bias) {
                        (0, Some(bias)) => Start::Rows(std::array::from_fn(|r| bias[(fb + i) * MR + r])),
                        (0, None) => Start::Rows([0.0; MR]),
                        _ => Start::Tile,
                    };
                    // Rows fb * MR.. of the weight, from inner index k0.
                    let a = (fe > fb).then(|| &w[fb * MR * k + k0..(fe * MR - 1) * k + k0 + kc]);
                    let mut m = 0;
                    while m < cols.len() {
                        let tc = &cols[m].0;
                        // Two micro-panels run as one wider tile: in place when side by side in
                        // the output, through the staging tiles when either is scattered.
                        let direct = tc.contiguous
                            && cols
                                .get(m + 1)
                                .is_none_or(|(next, _)| !next.contiguous || next.first == tc.first + NR);
                        let width = if m + 1 < cols.len() && (!direct || cols[m + 1].0.contiguous) {
                            2
                        } else {
                            1
                        };
                        if let (Some(a), true) = (a, direct) {
                            let bs = [b(m), if width == 2 { b(m + 1) } else { &[] }];
                            // SAFETY: this task alone owns rows p0..p1 x columns of block cb of
                            // the output, so the tiles of panels fb..fe of these micro-panels.
                            unsafe {
                                run_owned_tiles(
                                    &kernel,
                                    kc,
                                    (a, k),
                                    &bs[..width],
                                    (&out, tc.first + fb * MR * pix, pix),
                                    fe - fb,
                                    starts,
                                );
                            }
                        } else if let Some(a) = a {
                            // The scattered columns of the full panels gathered into staging
                            // tiles (NR columns per micro-panel), run, and scattered back.
                            let ldc = width * NR;
                            let stage = &mut stage[..(fe - fb) * MR * ldc];
                            for (w_, (tc, _)) in cols[m..m + width].iter().enumerate() {
                                for (i, rows) in stage.chunks_exact_mut(MR * ldc).enumerate() {
                                    let start = starts(i);
                                    for (r, row) in rows.chunks_exact_mut(ldc).enumerate() {
                                        let co = (fb + i) * MR + r;
                                        for &(jj, len, off) in tc.runs() {
                                            let d = &mut row[w_ * NR + jj..][..len];
                                            match start {
                                                Start::Rows(v) => d.fill(v[r]),
                                                // SAFETY: as above.
                                                Start::Tile => unsafe { out.read(off + co * pix, d) },
                                            }
                                        }
                                    }
                                }
                            }
                            let panels = Panels {
                                a: a.as_ptr(),
                                lda: k,
                                c: stage.as_mut_ptr(),
                                ldc,
                                count: fe - fb,
                            };
                            // SAFETY: `stage` holds the tiles of panels fb..fe of both
                            // micro-panels (ldc = width * NR), the weight rows lie in `a`.
                            unsafe {
                                if width == 2 {
                                    let c1 = stage.as_mut_ptr().add(NR);
                                    kernel.run_panels_wide(kc, [b(m), b(m + 1)], panels, c1, |_| Start::Tile);
                                } else {
                                    kernel.run_panels(kc, b(m), panels, |_| Start::Tile);
                                }
                            }
                            for (w_, (tc, _)) in cols[m..m + width].iter().enumerate() {
                                for (i, rows) in stage.chunks_exact(MR * ldc).enumerate() {
                                    for (r, row) in rows.chunks_exact(ldc).enumerate() {
                                        let co = (fb + i) * MR + r;
                                        for &(jj, len, off) in tc.runs() {
                                            // SAFETY: as above.
                                            unsafe { out.write(off + co * pix, &row[w_ * NR + jj..][..len]) };
                                        }
                                    }
                                }
                            }
                        }
                        for (m, (tc, _)) in cols.iter().enumerate().skip(m).take(width) {
                            for p in fe.max(pb)..pe {
                                let rows = panel_rows(p, s.co);
                                let a: [&[f32]; MR] = rows.map(|r| &w[r * k + k0..][..kc]);
                                let valid_rows = (s.co - p * MR).min(MR);
                                let mut tile: Tile = [[0.0; NR]; MR];
                                for (row, &co) in tile.iter_mut().zip(&rows).take(valid_rows) {
                                    for &(jj, len, off) in tc.runs() {
                                        let d = &mut row[jj..jj + len];
                                        match (k0, bias) {
                                            (0, Some(bias)) => d.fill(bias[co]),
                                            (0, None) => d.fill(0.0),
                                            // SAFETY: as above.
                                            _ => unsafe { out.read(off + co * pix, d) },
                                        }
                                    }
                                }
                                kernel.run(kc, a, b(m), &mut tile);
                                for (row, &co) in tile.iter().zip(&rows).take(valid_rows) {
                                    for &(jj, len, off) in tc.runs() {
                                        // SAFETY: as above.
                                        unsafe { out.write(off + co * pix, &row[jj..jj + len]) };
                                    }
                                }
                            }
                        }
                        m += width;
                    }
                }
            }
        });
    });
}

/// `dw[co, k] += sum over pixels of grad[co, pixel] x col[k, pixel]` for the images `images`
/// of the batch, in that order (each image's pixels in order), for `grad` `[b, co, ho, wo]` and
/// `x` `[b, c, h, w]`; `dw` is the row-major `co x (c * kh * kw)` accumulator.
pub(super) fn weight_grad(
    isa: CpuIsa,
    s: &ConvShape,
    grad: &[f32],
    x: &[f32],
    images: &[usize],
    dw: &mut [f32],
) {
    let (k, pix) = (s.k(), s.pix());
    let total = images.len() * pix;
    if total == 0 || k == 0 {
        return;
    }
    assert!(
        grad.len() >= s.b * s.co * pix
            && x.len() >= s.b * s.in_len()
            && dw.len() >= s.co * k
            && images.iter().all(|&i| i < s.b),
        "conv weight-gradient operands shorter than the shape"
    );
    let kernel = TileKernel::for_isa(isa).unwrap_or_else(TileKernel::portable);
    let mc = kernel.panels_per_group();
    // The pixels in chain order, in blocks of at most KC (as even as possible): each block a
    // list of runs.
    let block_len = even_blocks(total).1;
    let mut blocks: Vec<Vec<PixelRun>> = Vec::new();
    let (mut cur, mut filled) = (Vec::new(), 0);
    for &img in images {
        let mut p0 = 0;
        while p0 < pix {
            let len = (pix - p0).min(block_len - filled);
            cur.push(PixelRun { img, p0, len });
            (filled, p0) = (filled + len, p0 + len);
            if filled == block_len {
                blocks.push(std::mem::take(&mut cur));
                filled = 0;
            }
        }
    }
    if !cur.is_empty() {
        blocks.push(cur);
    }
    let panels = s.co.div_ceil(MR);
    let k_blocks = k.div_ceil(NC);
    let groups = row_groups(panels, k_blocks);
    let tasks: Vec<(usize, (usize, usize))> = (0..k_blocks)
        .flat_map(|kb| groups.iter().map(move |&g| (kb, g)))
        .collect();
    let dw = Shared::new(dw);
    run_tasks(&tasks, s.co * k * total, |&(kb, (p0, p1))| {
        let k_start = kb * NC;
        let micro = (k - k_start).min(NC).div_ceil(NR);
        let offsets: Vec<Option<TapOffsets>> = (0..micro)
            .map(|m| TapOffsets::new(isa, s, k_start + m * NR))
            .collect();
        // Panels p0..full hold MR rows each; a last partial panel goes through a tile copy.
        let full = p1.min(s.co / MR).max(p0);
        with_panel(|panel| {
            for runs in &blocks {
                let rows_in_block: usize = runs.iter().map(|r| r.len).sum();
                for (m, offsets) in offsets.iter().enumerate() {
                    let dst = &mut panel[m * KC * NR..];
                    match offsets {
                        Some(o) => o.pack(s, x, runs, dst),
                        None => pack_taps(s, x, runs, k_start + m * NR, dst),
                    }
                }
                let whole = |m: usize| k - (k_start + m * NR) >= NR && full > p0;
                // Two whole micro-panels side by side run as one wider tile.
                let width = |m: usize| if m + 1 < micro && whole(m + 1) { 2 } else { 1 };
                let b = |m: usize| &panel[m * KC * NR..][..rows_in_block * NR];
                // The full panels in groups of `mc`, whose gradient rows stay in cache while the
                // tiles walk the micro-panels.
                for gb in (p0..full).step_by(mc) {
                    let ge = (gb + mc).min(full);
                    let (r0, r1) = (gb * MR, ge * MR);
                    // Rows r0..r1 of the output gradient over this block's pixels: in place
                    // for one run; gathered for several, so that each tile runs the block's
                    // chain in one call (runs of a pixel or a few would each load and store
                    // the accumulator tiles).
                    let gathered = |rows: &mut [f32]| {
                        for (r, dst) in rows.chunks_exact_mut(rows_in_block).take(r1 - r0).enumerate() {
                            let mut at = 0;
                            for run in runs {
                                let src = run.img * s.co * pix + (r0 + r) * pix + run.p0;
                                dst[at..at + run.len].copy_from_slice(&grad[src..src + run.len]);
                                at += run.len;
                            }
                        }
                    };
                    let tiles = |a: &[f32], lda: usize| {
                        let mut m = 0;
                        while m < micro && whole(m) {
                            let (width, j0) = (width(m), k_start + m * NR);
                            let bs = [b(m), if width == 2 { b(m + 1) } else { &[] }];
                            // SAFETY: this task alone owns rows p0..p1 x columns of block kb of
                            // the accumulator, so the tiles of panels gb..ge of these
                            // micro-panels.
                            unsafe {
                                run_owned_tiles(
                                    &kernel,
                                    rows_in_block,
                                    (a, lda),
                                    &bs[..width],
                                    (&dw, r0 * k + j0, k),
                                    ge - gb,
                                    |_| Start::Tile,
                                );
                            }
                            m += width;
                        }
                    };
                    match runs.as_slice() {
                        [run] => {
                            let base = run.img * s.co * pix + run.p0;
                            tiles(&grad[base + r0 * pix..base + (r1 - 1) * pix + run.len], pix);
                        }
                        _ => with_rows(|rows| {
                            let rows = &mut rows[..(r1 - r0) * rows_in_block];
                            gathered(rows);
                            tiles(rows, rows_in_block);
                        }),
                    }
                }
                // The rest: partial panels, and every panel of a partial micro-panel.
                for m in 0..micro {
                    let j0 = k_start + m * NR;
                    let valid_cols = (k - j0).min(NR);
                    let first = if whole(m) { full } else { p0 };
                    for p in first..p1 {
                        let rows = panel_rows(p, s.co);
                        let valid_rows = (s.co - p * MR).min(MR);
                        let mut tile: Tile = [[0.0; NR]; MR];
                        for (row, &r) in tile.iter_mut().zip(&rows).take(valid_rows) {
                            // SAFETY: as above.
                            unsafe { dw.read(r * k + j0, &mut row[..valid_cols]) };
                        }
                        let mut at = 0;
                        for run in runs {
                            let base = run.img * s.co * pix + run.p0;
                            let a: [&[f32]; MR] = rows.map(|r| &grad[base + r * pix..][..run.len]);
                            kernel.run(run.len, a, &b(m)[at * NR..], &mut tile);
                            at += run.len;
                        }
                        for (row, &r) in tile.iter().zip(&rows).take(valid_rows) {
                            // SAFETY: as above.
                            unsafe { dw.write(r * k + j0, &row[..valid_cols]) };
                        }
                    }
                }
            }
        });
    });
}

/// Whether the input gradient of `s` is a forward convolution of the output gradient (stride
/// 1, dilation 1, padding at most the kernel size - 1 on both axes).
pub(super) fn input_grad_is_conv(s: &ConvShape) -> bool {
    s.stride == [1, 1] && s.dil == [1, 1] && s.pad[0] < s.kh && s.pad[1] < s.kw
}

/// Input channels per task of [`flip_weights`]: each task reads `FLIP_CHANNELS * kh * kw`
/// consecutive weights per output channel and writes that many rows in order, so both sides
/// stream through the caches (one channel per task reads `c * kh * kw` apart).
const FLIP_CHANNELS: usize = 16;

/// The weights `[co, c, kh, kw]` flipped and transposed into `[c, co, kh, kw]` (`out`).
pub(super) fn flip_weights(s: &ConvShape, w: &[f32], out: &mut [f32]) {
    let taps = s.kh * s.kw;
    let row = s.co * taps;
    let block = |(bi, dst): (usize, &mut [f32])| {
        let c0 = bi * FLIP_CHANNELS;
        let n = dst.len() / row.max(1);
        for o in 0..s.co {
            let src = &w[(o * s.c + c0) * taps..][..n * taps];
            for (j, src) in src.chunks_exact(taps).enumerate() {
                let d = &mut dst[j * row + o * taps..][..taps];
                d.iter_mut().zip(src.iter().rev()).for_each(|(v, &x)| *v = x);
            }
        }
    };
    let out = &mut out[..s.c * row];
    if row == 0 {
        return;
    }
    if out.len() >= 1 << 15 {
        out.par_chunks_mut(FLIP_CHANNELS * row)
            .enumerate()
            .for_each(block);
    } else {
        out.chunks_mut(FLIP_CHANNELS * row).enumerate().for_each(block);
    }
}

/// The input gradient `gx` (`[b, c, h, w]`, every element written) of `grad` (`[b, co, ho, wo]`)
/// given the flipped weights of [`flip_weights`]; requires [`input_grad_is_conv`].
pub(super) fn input_grad(isa: CpuIsa, s: &ConvShape, grad: &[f32], flipped: &[f32], gx: &mut [f32]) {
    debug_assert!(input_grad_is_conv(s));
    let t = ConvShape {
        b: s.b,
        c: s.co,
        h: s.ho,
        w: s.wo,
        co: s.c,
        kh: s.kh,
        kw: s.kw,
        stride: [1, 1],
        pad: [s.kh - 1 - s.pad[0], s.kw - 1 - s.pad[1]],
        dil: [1, 1],
        ho: s.h,
        wo: s.w,
    };
    forward(isa, &t, grad, flipped, None, gx);
}
