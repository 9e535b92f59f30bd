//! Packing for the implicit-GEMM convolution: panels of `NR` columns read straight from the
//! images, as im2col would have laid them out, without materialising the column matrix.
//!
//! The inner index `k = (ci * kh + ky) * kw + kx` runs over the weight's layout
//! `[co, c, kh, kw]`; a column is an output pixel `(image, oy, ox)` of the batch. A tap that
//! falls in the padding reads 0, as im2col writes it.

use super::tile::NR;

/// One convolution with one group as the implicit GEMM sees it: `[b, c, h, w]` images to
/// `[b, co, ho, wo]` outputs, a `co x (c * kh * kw)` weight matrix.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConvShape {
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub co: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dil: [usize; 2],
    pub ho: usize,
    pub wo: usize,
}

impl ConvShape {
    /// Inner dimension: `c * kh * kw`.
    pub fn k(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Output pixels per image.
    pub fn pix(&self) -> usize {
        self.ho * self.wo
    }

    /// Input elements per image.
    pub fn in_len(&self) -> usize {
        self.c * self.h * self.w
    }

    /// The tap of inner index `k`: `(ci, ky, kx)`.
    fn tap(&self, k: usize) -> (usize, usize, usize) {
        let taps = self.kh * self.kw;
        (k / taps, (k % taps) / self.kw, k % self.kw)
    }

    /// Input row read by output row `oy` under kernel row `ky` (`None` in the padding).
    fn input_row(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.stride[0] + ky * self.dil[0])
            .checked_sub(self.pad[0])
            .filter(|&iy| iy < self.h)
    }

    /// Copies the `len` values that output columns `ox0..ox0 + len` of one output row read under
    /// kernel column `kx` from the input row `row` into `dst` (with stride `step`), 0 in the
    /// padding.
    fn read_row(&self, row: &[f32], ox0: usize, kx: usize, len: usize, dst: &mut [f32], step: usize) {
        let (s, off) = (self.stride[1], kx * self.dil[1]);
        for (t, d) in dst.iter_mut().step_by(step).take(len).enumerate() {
            *d = ((ox0 + t) * s + off)
                .checked_sub(self.pad[1])
                .and_then(|ix| row.get(ix))
                .copied()
                .unwrap_or(0.0);
        }
    }

    /// Like [`ConvShape::read_row`] into a contiguous `dst`, with a block copy for stride 1.
    fn read_row_contiguous(&self, row: &[f32], ox0: usize, kx: usize, dst: &mut [f32]) {
        if self.stride[1] != 1 {
            return self.read_row(row, ox0, kx, dst.len(), dst, 1);
        }
        // Input column of output column ox0 + t is ox0 + t + off - pad: valid for t in lo..hi.
        let start = (ox0 + kx * self.dil[1]) as isize - self.pad[1] as isize;
        let lo = (-start).clamp(0, dst.len() as isize) as usize;
        let hi = (self.w as isize - start).clamp(lo as isize, dst.len() as isize) as usize;
        dst[..lo].fill(0.0);
        dst[hi..].fill(0.0);
        if hi > lo {
            let s0 = (start + lo as isize) as usize;
            dst[lo..hi].copy_from_slice(&row[s0..s0 + (hi - lo)]);
        }
    }
}

/// A run of columns inside one output row: `len` columns from `ox0` of row `oy` of image
/// `img`, landing at panel column `at`.
#[derive(Debug, Clone, Copy, Default)]
struct RowRun {
    at: usize,
    len: usize,
    img: usize,
    oy: usize,
    ox0: usize,
}

/// Splits the columns `j0..j0 + n` of the batch into runs inside output rows.
fn row_runs(s: &ConvShape, j0: usize, n: usize, runs: &mut [RowRun; NR]) -> usize {
    let (pix, wo) = (s.pix(), s.wo);
    let (mut count, mut at) = (0, 0);
    while at < n {
        let j = j0 + at;
        let (img, p) = (j / pix, j % pix);
        let (oy, ox0) = (p / wo, p % wo);
        let len = (wo - ox0).min(n - at);
        runs[count] = RowRun {
            at,
            len,
            img,
            oy,
            ox0,
        };
        count += 1;
        at += len;
    }
    count
}

/// Packs the columns `j0..j0 + NR` (those below `b * ho * wo`; the rest 0) under the inner
/// indices `k0..k0 + kc` of the images `x` into `out` (`kc` rows of `NR`).
pub(super) fn pack_columns(s: &ConvShape, x: &[f32], j0: usize, k0: usize, kc: usize, out: &mut [f32]) {
    let n = NR.min((s.b * s.pix()).saturating_sub(j0));
    let mut runs = [RowRun::default(); NR];
    let count = row_runs(s, j0, n, &mut runs);
    let plane = s.h * s.w;
    for (kk, dst) in out[..kc * NR].chunks_exact_mut(NR).enumerate() {
        let (ci, ky, kx) = s.tap(k0 + kk);
        dst[n..].fill(0.0);
        for r in &runs[..count] {
            let d = &mut dst[r.at..r.at + r.len];
            match s.input_row(r.oy, ky) {
                None => d.fill(0.0),
                Some(iy) => {
                    let row = &x[(r.img * s.c + ci) * plane + iy * s.w..][..s.w];
                    s.read_row_contiguous(row, r.ox0, kx, d);
                }
            }
        }
    }
}

/// A run of consecutive pixels of one image, in the order a weight gradient sums them.
#[derive(Debug, Clone, Copy)]
pub(super) struct PixelRun {
    /// Image (index into the batch).
    pub img: usize,
    /// First pixel.
    pub p0: usize,
    /// Pixels.
    pub len: usize,
}

/// Packs, for the pixels of `runs` (in order, `sum(len)` rows) and the inner indices
/// `k0..k0 + NR` (those below `c * kh * kw`; the rest 0), the input values they multiply in a
/// weight gradient into `out` (one row of `NR` per pixel): the transpose of im2col's block.
pub(super) fn pack_taps(s: &ConvShape, x: &[f32], runs: &[PixelRun], k0: usize, out: &mut [f32]) {
    let rows: usize = runs.iter().map(|r| r.len).sum();
    let out = &mut out[..rows * NR];
    let (k, plane, wo) = (s.k(), s.h * s.w, s.wo);
    for jj in 0..NR {
        let col = &mut out[jj..];
        if k0 + jj >= k {
            col.iter_mut().step_by(NR).for_each(|v| *v = 0.0);
            continue;
        }
        let (ci, ky, kx) = s.tap(k0 + jj);
        let mut at = 0;
        for r in runs {
            let mut p = r.p0;
            while p < r.p0 + r.len {
                let (oy, ox0) = (p / wo, p % wo);
                let len = (wo - ox0).min(r.p0 + r.len - p);
                let d = &mut col[at * NR..];
                match s.input_row(oy, ky) {
                    None => d.iter_mut().step_by(NR).take(len).for_each(|v| *v = 0.0),
                    Some(iy) => {
                        let row = &x[(r.img * s.c + ci) * plane + iy * s.w..][..s.w];
                        s.read_row(row, ox0, kx, len, d, NR);
                    }
                }
                at += len;
                p += len;
            }
        }
    }
}
