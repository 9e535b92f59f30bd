//! Packing for the implicit-GEMM convolution: panels of `NR` columns read straight from the
//! images, as im2col would have laid them out, without materialising the column matrix.
//!
//! The inner index `k = (ci * kh + ky) * kw + kx` runs over the weight's layout
//! `[co, c, kh, kw]`; a column is an output pixel `(image, oy, ox)` of the batch. A tap that
//! falls in the padding reads 0, as im2col writes it.

use crate::kernels::tile::NR;

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
    fn tap(&self, k: usize) -> Tap {
        let taps = self.kh * self.kw;
        Tap {
            ci: k / taps,
            ky: (k % taps) / self.kw,
            kx: k % self.kw,
        }
    }

    /// The tap after `t` in the order of the inner index (no division).
    #[inline]
    fn next_tap(&self, mut t: Tap) -> Tap {
        t.kx += 1;
        if t.kx == self.kw {
            t.kx = 0;
            t.ky += 1;
            if t.ky == self.kh {
                t.ky = 0;
                t.ci += 1;
            }
        }
        t
    }

    /// Input row read by output row `oy` under kernel row `ky` (`None` in the padding).
    #[inline]
    pub(super) fn input_row(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.stride[0] + ky * self.dil[0])
            .checked_sub(self.pad[0])
            .filter(|&iy| iy < self.h)
    }

    /// The output columns `t` in `0..len` (from output column `ox0`) whose input column under
    /// kernel column `kx` lies inside the image: `lo..hi`, and the input column of `lo`
    /// (0 when none is; stride 1 only).
    #[inline]
    pub(super) fn inside_cols(&self, ox0: usize, kx: usize, len: usize) -> (usize, usize, usize) {
        // Input column of output column ox0 + t is ox0 + t + off - pad.
        let start = (ox0 + kx * self.dil[1]) as isize - self.pad[1] as isize;
        let lo = (-start).clamp(0, len as isize) as usize;
        let hi = (self.w as isize - start).clamp(lo as isize, len as isize) as usize;
        // With no column inside (hi == lo) the input column is 0, an empty read.
        (
            lo,
            hi,
            if hi > lo {
                (start + lo as isize) as usize
            } else {
                0
            },
        )
    }

    /// Copies the `len` values that output columns `ox0..ox0 + len` of one output row read under
    /// kernel column `kx` from the input row `row` into `dst` (with stride `step`), 0 in the
    /// padding.
    fn read_row(&self, row: &[f32], ox0: usize, kx: usize, len: usize, dst: &mut [f32], step: usize) {
        if self.stride[1] == 1 {
            let (lo, hi, s0) = self.inside_cols(ox0, kx, len);
            let mut d = dst.iter_mut().step_by(step);
            d.by_ref().take(lo).for_each(|v| *v = 0.0);
            d.by_ref()
                .zip(&row[s0..s0 + (hi - lo)])
                .for_each(|(v, &x)| *v = x);
            d.take(len - hi).for_each(|v| *v = 0.0);
            return;
        }
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
    #[inline]
    fn read_row_contiguous(&self, row: &[f32], ox0: usize, kx: usize, dst: &mut [f32]) {
        if self.stride[1] != 1 {
            return self.read_row(row, ox0, kx, dst.len(), dst, 1);
        }
        let (lo, hi, s0) = self.inside_cols(ox0, kx, dst.len());
        if lo == 0 && hi == NR && dst.len() == NR {
            // The common case: a whole panel row inside the image (a fixed-size copy).
            let src: &[f32; NR] = row[s0..s0 + NR].try_into().expect("NR values");
            dst.copy_from_slice(src);
            return;
        }
        dst[..lo].fill(0.0);
        dst[hi..].fill(0.0);
        dst[lo..hi].copy_from_slice(&row[s0..s0 + (hi - lo)]);
    }
}

/// A tap of the kernel: input channel, kernel row, kernel column.
#[derive(Debug, Clone, Copy)]
struct Tap {
    ci: usize,
    ky: usize,
    kx: usize,
}

/// A run of columns inside one output row: `len` columns from `ox0` of row `oy` of image
/// `img`, landing at panel column `at`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RowRun {
    pub at: usize,
    pub len: usize,
    pub img: usize,
    pub oy: usize,
    pub ox0: usize,
}

/// The columns `j0..j0 + NR` of a batch as output-row runs (those below `b * ho * wo`; the
/// rest are 0 in a packed panel), computed once per micro-panel of a call.
#[derive(Debug, Clone, Copy)]
pub(super) struct PanelCols {
    /// Valid columns.
    n: usize,
    /// Runs in `runs`.
    pub count: usize,
    /// The runs, `count` of them.
    pub runs: [RowRun; NR],
}

impl PanelCols {
    /// Splits the columns `j0..j0 + NR` of the batch of `s` into runs inside output rows.
    pub(super) fn new(s: &ConvShape, j0: usize) -> Self {
        let n = NR.min((s.b * s.pix()).saturating_sub(j0));
        let (pix, wo) = (s.pix(), s.wo);
        let mut runs = [RowRun::default(); NR];
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
        PanelCols { n, count, runs }
    }
}

/// Packs the columns of `cols` under the inner indices `k0..k0 + kc` of the images `x` into
/// `out` (`kc` rows of `NR`).
pub(super) fn pack_columns(
    s: &ConvShape,
    x: &[f32],
    cols: &PanelCols,
    k0: usize,
    kc: usize,
    out: &mut [f32],
) {
    let (n, runs) = (cols.n, &cols.runs[..cols.count]);
    let plane = s.h * s.w;
    let mut tap = s.tap(k0);
    for dst in out[..kc * NR].chunks_exact_mut(NR) {
        dst[n..].fill(0.0);
        for r in runs {
            let d = &mut dst[r.at..r.at + r.len];
            match s.input_row(r.oy, tap.ky) {
                None => d.fill(0.0),
                Some(iy) => {
                    let row = &x[(r.img * s.c + tap.ci) * plane + iy * s.w..][..s.w];
                    s.read_row_contiguous(row, r.ox0, tap.kx, d);
                }
            }
        }
        tap = s.next_tap(tap);
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
        let Tap { ci, ky, kx } = s.tap(k0 + jj);
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
