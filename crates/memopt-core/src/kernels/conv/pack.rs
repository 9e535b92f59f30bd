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
    fn input_row(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.stride[0] + ky * self.dil[0])
            .checked_sub(self.pad[0])
            .filter(|&iy| iy < self.h)
    }

    /// The output columns `t` in `0..len` (from output column `ox0`) whose input column under
    /// kernel column `kx` lies inside the image: `lo..hi`, and the input column of `lo`
    /// (0 when none is; stride 1 only).
    #[inline]
    fn inside_cols(&self, ox0: usize, kx: usize, len: usize) -> (usize, usize, usize) {
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
struct RowRun {
    at: usize,
    len: usize,
    img: usize,
    oy: usize,
    ox0: usize,
}

/// The columns `j0..j0 + NR` of a batch as output-row runs (those below `b * ho * wo`; the
/// rest are 0 in a packed panel), computed once per micro-panel of a call.
#[derive(Debug, Clone, Copy)]
pub(super) struct PanelCols {
    /// Valid columns.
    n: usize,
    /// Runs in `runs`.
    count: usize,
    runs: [RowRun; NR],
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

/// Where the lanes `lo..hi` of a packed row of [`ColumnTable`] come from: lane `t` of the row
/// of input channel `ci` is `x[ci * h * w + off + t]` (`off` may be negative: only the lanes
/// `lo..hi` are read).
#[derive(Debug, Clone, Copy)]
struct Segment {
    off: isize,
    lo: i32,
    hi: i32,
}

/// The packing of [`pack_columns`] precomputed for a set of micro-panels of a stride-1 (along
/// the width) convolution: for every micro-panel and kernel tap `(ky, kx)`, the segments of a
/// packed row that lie inside the image (the other lanes are padding, 0). A packed row of any
/// input channel is then a few masked loads, the same values [`pack_columns`] writes.
pub(super) struct ColumnTable {
    segments: Vec<Segment>,
    /// `ranges[m * taps + tap]`: the segments of micro-panel `m` under kernel tap `tap`.
    ranges: Vec<(u32, u32)>,
    /// `kh * kw`.
    taps: usize,
    /// The elements of the images the table was built for (`b * c * h * w`).
    len: usize,
}

impl ColumnTable {
    /// The table of the micro-panels `cols` of `s`, or `None` where the packing has no
    /// vector path (a CPU without AVX2, a stride above 1 along the width).
    pub(super) fn new<'a>(s: &ConvShape, cols: impl Iterator<Item = &'a PanelCols>) -> Option<Self> {
        if s.stride[1] != 1 || !avx2_available() {
            return None;
        }
        let (taps, plane) = (s.kh * s.kw, s.h * s.w);
        let len = s.b * s.in_len();
        let (mut segments, mut ranges) = (Vec::new(), Vec::new());
        for pc in cols {
            for tap in 0..taps {
                let (ky, kx) = (tap / s.kw, tap % s.kw);
                let start = segments.len() as u32;
                for r in &pc.runs[..pc.count] {
                    let Some(iy) = s.input_row(r.oy, ky) else {
                        continue;
                    };
                    let (lo, hi, s0) = s.inside_cols(r.ox0, kx, r.len);
                    if hi <= lo {
                        continue;
                    }
                    // Lane r.at + lo reads column s0 of row iy of image r.img's channel 0.
                    let first = r.img * s.c * plane + iy * s.w + s0;
                    // Every lane read lies in the images, for every channel (the safety of
                    // `pack`): the last channel's last element of the segment included.
                    assert!(
                        first + (hi - lo) + (s.c - 1) * plane <= len,
                        "column table outside the images"
                    );
                    segments.push(Segment {
                        off: first as isize - (r.at + lo) as isize,
                        lo: (r.at + lo) as i32,
                        hi: (r.at + hi) as i32,
                    });
                }
                ranges.push((start, segments.len() as u32));
            }
        }
        Some(ColumnTable {
            segments,
            ranges,
            taps,
            len,
        })
    }

    /// [`pack_columns`] of micro-panel `m` of the table: the inner indices `k0..k0 + kc` of the
    /// images `x` (those of the table's shape `s`) into `out` (`kc` rows of `NR`).
    pub(super) fn pack(&self, s: &ConvShape, x: &[f32], m: usize, k0: usize, kc: usize, out: &mut [f32]) {
        assert!(
            x.len() >= self.len && self.len == s.b * s.in_len() && k0 + kc <= s.k(),
            "column table used on other images"
        );
        let out = &mut out[..kc * NR];
        let ranges = &self.ranges[m * self.taps..][..self.taps];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a table exists only where the CPU has AVX2 (`new`); every lane read lies in
        // `x` (asserted in `new` for every channel, and `x` is at least as long as the images
        // the table was built for).
        unsafe {
            avx2::pack(self, s, x, ranges, k0, out);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, x, ranges, k0, out);
            unreachable!("a column table is only built where AVX2 exists");
        }
    }
}

/// Whether the CPU has AVX2 (the packing's vector path).
fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{ColumnTable, ConvShape, NR, Segment};
    use std::arch::x86_64::*;

    /// The packed rows `k0..k0 + out.len() / NR` of the micro-panel whose tap ranges are
    /// `ranges`: each row the OR of its segments' masked loads (lanes outside every segment
    /// are 0).
    ///
    /// # Safety
    /// The CPU must have AVX2; every lane `lo..hi` of every segment, at every channel below
    /// `s.c`, must lie in `x` (what [`ColumnTable::new`] asserts).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack(
        t: &ColumnTable,
        s: &ConvShape,
        x: &[f32],
        ranges: &[(u32, u32)],
        k0: usize,
        out: &mut [f32],
    ) {
        let plane = s.h * s.w;
        let (mut ci, mut tap) = (k0 / t.taps, k0 % t.taps);
        let lanes0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let lanes1 = _mm256_add_epi32(lanes0, _mm256_set1_epi32(8));
        let mask = |lanes: __m256i, seg: &Segment| {
            let above = _mm256_cmpgt_epi32(lanes, _mm256_set1_epi32(seg.lo - 1));
            let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(seg.hi), lanes);
            _mm256_and_si256(above, below)
        };
        for dst in out.chunks_exact_mut(NR) {
            let (a, b) = ranges[tap];
            let base = x.as_ptr().wrapping_add(ci * plane);
            let (mut v0, mut v1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for seg in &t.segments[a as usize..b as usize] {
                let p = base.wrapping_offset(seg.off);
                // SAFETY: only the lanes lo..hi are read (the masks), and those lie in `x`
                // (the caller's contract); masked-off lanes are never accessed.
                unsafe {
                    if seg.lo < 8 {
                        v0 = _mm256_or_ps(v0, _mm256_maskload_ps(p, mask(lanes0, seg)));
                    }
                    if seg.hi > 8 {
                        v1 = _mm256_or_ps(v1, _mm256_maskload_ps(p.wrapping_add(8), mask(lanes1, seg)));
                    }
                }
            }
            // SAFETY: `dst` holds NR = 16 floats.
            unsafe {
                _mm256_storeu_ps(dst.as_mut_ptr(), v0);
                _mm256_storeu_ps(dst.as_mut_ptr().add(8), v1);
            }
            tap += 1;
            if tap == t.taps {
                tap = 0;
                ci += 1;
            }
        }
    }
}
