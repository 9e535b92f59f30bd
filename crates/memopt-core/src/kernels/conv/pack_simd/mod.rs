//! Vector (AVX2, AVX-512) packing for the implicit-GEMM convolution: the same panels as
//! [`super::pack`]'s `pack_columns` and `pack_taps`, bit for bit (values are only copied), with
//! masked loads and gathers instead of per-row index arithmetic and scalar copies. Lanes in
//! the padding are masked off and read 0; a masked-off lane is never accessed.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use super::pack::{ConvShape, PanelCols, PixelRun};
use crate::cpu_isa::CpuIsa;
use crate::kernels::tile::NR;

/// Where the lanes `lo..hi` of a packed row of [`ColumnTable`] come from: lane `t` of the row
/// of input channel `ci` is `x[ci * h * w + off + t]` (`off` may be negative: only the lanes
/// `lo..hi` are read).
#[derive(Debug, Clone, Copy)]
struct Segment {
    off: isize,
    lo: i32,
    hi: i32,
    /// -1 in the lanes `lo..hi`, 0 elsewhere (the load masks).
    mask: [i32; NR],
}

impl Segment {
    /// The lanes `lo..hi` as a 16-lane mask.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn lanes(&self) -> u16 {
        let bits = |n: i32| (1u32 << n) - 1;
        (bits(self.hi) & !bits(self.lo)) as u16
    }
}

/// The packing of `pack_columns` precomputed for a set of micro-panels of a stride-1 (along
/// the width) convolution: for every micro-panel and kernel tap `(ky, kx)`, the segments of a
/// packed row that lie inside the image (the other lanes are padding, 0). A packed row of any
/// input channel is then a few masked loads, the same values `pack_columns` writes.
pub(super) struct ColumnTable {
    segments: Vec<Segment>,
    /// `ranges[m * taps + tap]`: the segments of micro-panel `m` under kernel tap `tap`.
    ranges: Vec<(u32, u32)>,
    /// `kh * kw`.
    taps: usize,
    /// The elements of the images the table was built for (`b * c * h * w`).
    len: usize,
    /// The vector path that packs.
    isa: CpuIsa,
}

impl ColumnTable {
    /// The table of the micro-panels `cols` of `s` for path `isa`, or `None` where the packing
    /// has no vector path (the portable path, a stride above 1 along the width).
    pub(super) fn new<'a>(
        isa: CpuIsa,
        s: &ConvShape,
        cols: impl Iterator<Item = &'a PanelCols>,
    ) -> Option<Self> {
        if s.stride[1] != 1 || !vector_path(isa) {
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
                        mask: std::array::from_fn(|t| -i32::from((r.at + lo..r.at + hi).contains(&t))),
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
            isa,
        })
    }

    /// `pack_columns` of micro-panel `m` of the table: the inner indices `k0..k0 + kc` of the
    /// images `x` (those of the table's shape `s`) into `out` (`kc` rows of `NR`).
    pub(super) fn pack(&self, s: &ConvShape, x: &[f32], m: usize, k0: usize, kc: usize, out: &mut [f32]) {
        assert!(
            x.len() >= self.len && self.len == s.b * s.in_len() && k0 + kc <= s.k(),
            "column table used on other images"
        );
        let out = &mut out[..kc * NR];
        let ranges = &self.ranges[m * self.taps..][..self.taps];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a table exists only for a vector path the CPU has (`new`); every lane read
        // lies in `x` (asserted in `new` for every channel, and `x` is at least as long as the
        // images the table was built for).
        unsafe {
            match self.isa {
                CpuIsa::Avx512 => avx512::pack(self, s, x, ranges, k0, out),
                _ => avx2::pack(self, s, x, ranges, k0, out),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, x, ranges, k0, out);
            unreachable!("a column table is only built where AVX2 exists");
        }
    }
}

impl ColumnTable {
    /// The packed rows `k0..` of micro-panel ranges `ranges` of the images `x`, in order: per
    /// row, its input channel's plane (a pointer only offset, never read here) and the segments
    /// its lanes come from. Every vector path packs these.
    fn rows<'a>(
        &'a self,
        s: &ConvShape,
        x: &'a [f32],
        ranges: &'a [(u32, u32)],
        k0: usize,
    ) -> impl Iterator<Item = (*const f32, &'a [Segment])> + 'a {
        let plane = s.h * s.w;
        // The channel and tap of row k0, then stepped (no division per row).
        let (mut ci, mut tap) = (k0 / self.taps, k0 % self.taps);
        std::iter::from_fn(move || {
            let (a, b) = ranges[tap];
            let row = (
                x.as_ptr().wrapping_add(ci * plane),
                &self.segments[a as usize..b as usize],
            );
            tap += 1;
            if tap == self.taps {
                tap = 0;
                ci += 1;
            }
            Some(row)
        })
    }
}

impl TapOffsets {
    /// The pixels of `runs` in order: per pixel, its top-left input row and column (before
    /// the kernel's offsets; negative in the padding) and the address they give in lane 0's
    /// channel of `x` (only offset, never read here). Every vector path gathers from these.
    fn pixels<'a>(
        &'a self,
        s: &'a ConvShape,
        x: &'a [f32],
        runs: &'a [PixelRun],
    ) -> impl Iterator<Item = (i32, i32, *const f32)> + 'a {
        let plane = s.h * s.w;
        runs.iter().flat_map(move |r| {
            let image = (r.img * s.c + self.ci0) * plane;
            (r.p0..r.p0 + r.len).map(move |p| {
                let (oy, ox) = (p / s.wo, p % s.wo);
                let iy = (oy * s.stride[0]) as i32 - s.pad[0] as i32;
                let ix = (ox * s.stride[1]) as i32 - s.pad[1] as i32;
                let base = x
                    .as_ptr()
                    .wrapping_add(image)
                    .wrapping_offset(iy as isize * s.w as isize + ix as isize);
                (iy, ix, base)
            })
        })
    }
}

/// The gather of `pack_taps` for the inner indices `k0..k0 + NR` of a convolution: per lane,
/// the input channel, kernel row and column of its tap, as offsets from the lane-0 channel of
/// a pixel's top-left input element. A packed row (one pixel) is then two masked gathers.
pub(super) struct TapOffsets {
    /// `(ci - ci0) * h * w + ky * dil_y * w + kx * dil_x` per lane.
    off: [i32; NR],
    /// `ky * dil_y` per lane.
    dy: [i32; NR],
    /// `kx * dil_x` per lane.
    dx: [i32; NR],
    /// Lanes below `c * kh * kw - k0` (the rest read 0).
    valid: usize,
    /// The input channel of lane 0.
    ci0: usize,
    /// The vector path that packs.
    isa: CpuIsa,
}

impl TapOffsets {
    /// The offsets of the inner indices `k0..k0 + NR` of `s` for path `isa`, or `None` where
    /// the packing has no vector path (the portable path, offsets or sizes beyond `i32`).
    pub(super) fn new(isa: CpuIsa, s: &ConvShape, k0: usize) -> Option<Self> {
        let (k, taps, plane) = (s.k(), s.kh * s.kw, s.h * s.w);
        let fits = |v: usize| i32::try_from(v).is_ok();
        let reach = (NR + 1)
            .checked_mul(plane)
            .and_then(|v| v.checked_add(s.dil[0] * s.kh * s.w + s.dil[1] * s.kw));
        let coords = [
            s.h,
            s.w,
            s.stride[0] * s.ho,
            s.stride[1] * s.wo,
            s.pad[0],
            s.pad[1],
        ];
        if !vector_path(isa) || k0 >= k || !reach.is_some_and(fits) || !coords.into_iter().all(fits) {
            return None;
        }
        let ci0 = k0 / taps;
        let valid = (k - k0).min(NR);
        let (mut off, mut dy, mut dx) = ([0; NR], [0; NR], [0; NR]);
        for jj in 0..valid {
            let t = k0 + jj;
            let (ci, ky, kx) = (t / taps, (t % taps) / s.kw, t % s.kw);
            dy[jj] = (ky * s.dil[0]) as i32;
            dx[jj] = (kx * s.dil[1]) as i32;
            off[jj] = ((ci - ci0) * plane) as i32 + dy[jj] * s.w as i32 + dx[jj];
        }
        Some(TapOffsets {
            off,
            dy,
            dx,
            valid,
            ci0,
            isa,
        })
    }

    /// `pack_taps` of these inner indices: for the pixels of `runs` (in order), the input
    /// values they multiply, one row of `NR` per pixel, into `out`.
    pub(super) fn pack(&self, s: &ConvShape, x: &[f32], runs: &[PixelRun], out: &mut [f32]) {
        let rows: usize = runs.iter().map(|r| r.len).sum();
        assert!(
            x.len() >= s.b * s.in_len() && runs.iter().all(|r| r.img < s.b && r.p0 + r.len <= s.pix()),
            "tap offsets used outside the images"
        );
        let out = &mut out[..rows * NR];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: offsets exist only for a vector path the CPU has (`new`); a lane is read only when
        // its input row and column lie in the image and its tap below c * kh * kw, so inside
        // image `img < b` of `x` (asserted).
        unsafe {
            match self.isa {
                CpuIsa::Avx512 => avx512::pack_taps(self, s, x, runs, out),
                _ => avx2::pack_taps(self, s, x, runs, out),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, x, runs, out);
            unreachable!("tap offsets are only built where AVX2 exists");
        }
    }
}

/// Whether path `isa` has vector packers (AVX2, AVX-512) and the CPU runs it.
fn vector_path(isa: CpuIsa) -> bool {
    isa >= CpuIsa::Avx2 && isa.available()
}
