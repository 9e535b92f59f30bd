//! im2col (images to a column matrix) and col2im (its adjoint: scatter-add columns back into
//! images), parallel over rows of the column matrix and over image planes.
//!
//! The column matrix of `n` images has `c * kh * kw` rows, row `(ci, i, j)` holding the input
//! pixel under kernel tap `(i, j)` of channel `ci` for every output pixel of every image:
//! column `img * ho * wo + oy * wo + ox` (zero where the tap falls in the padding). The rows of
//! group `g` are the contiguous block `g * cg * kh * kw ..`, so each group's GEMM reads a plain
//! row-major block.

use super::params::ConvGeom;
use crate::kernels::par::PAR_THRESHOLD;
use rayon::prelude::*;

/// Output positions `lo..hi` (along one axis of `out_len` pixels) whose input coordinate
/// `o * stride + offset` lies inside `0..len`.
fn valid_range(offset: isize, stride: usize, len: usize, out_len: usize) -> (usize, usize) {
    let s = stride as isize;
    let lo = if offset >= 0 { 0 } else { (-offset + s - 1) / s };
    let limit = len as isize - offset;
    let hi = if limit <= 0 { 0 } else { (limit + s - 1) / s };
    let hi = hi.min(out_len as isize);
    (lo.min(hi) as usize, hi as usize)
}

/// Where kernel tap `(i, j)` reads: input offsets and the valid output ranges along both axes.
#[derive(Debug, Clone, Copy)]
struct Tap {
    /// Input row of output row 0 (may be negative: padding).
    y_off: isize,
    /// Input column of output column 0 (may be negative: padding).
    x_off: isize,
    /// Output rows whose input row is inside the image.
    rows: (usize, usize),
    /// Output columns whose input column is inside the image.
    cols: (usize, usize),
}

impl Tap {
    fn new(g: &ConvGeom, i: usize, j: usize) -> Tap {
        let p = &g.p;
        let y_off = (i * p.dilation[0]) as isize - p.padding[0] as isize;
        let x_off = (j * p.dilation[1]) as isize - p.padding[1] as isize;
        Tap {
            y_off,
            x_off,
            rows: valid_range(y_off, p.stride[0], g.h, g.ho),
            cols: valid_range(x_off, p.stride[1], g.w, g.wo),
        }
    }

    /// Input row of output row `oy` (which must lie in `rows`).
    fn iy(&self, g: &ConvGeom, oy: usize) -> usize {
        (oy as isize * g.p.stride[0] as isize + self.y_off) as usize
    }

    /// Input column of output column `ox` (which must lie in `cols`).
    fn ix(&self, g: &ConvGeom, ox: usize) -> usize {
        (ox as isize * g.p.stride[1] as isize + self.x_off) as usize
    }
}

/// Fills `col` (`c * kh * kw` rows of `n * ho * wo` columns) from the `n` images `x`
/// (`[n, c, h, w]`).
pub(super) fn im2col(g: &ConvGeom, x: &[f32], n: usize, col: &mut [f32]) {
    let (pix, ncols, plane) = (g.out_pixels(), n * g.out_pixels(), g.in_pixels());
    let taps = g.kh * g.kw;
    let col = &mut col[..g.c * taps * ncols];
    let row = |(r, dst): (usize, &mut [f32])| {
        let (ci, t) = (r / taps, r % taps);
        let tap = Tap::new(g, t / g.kw, t % g.kw);
        for img in 0..n {
            let src = &x[(img * g.c + ci) * plane..][..plane];
            tap_block(g, &tap, src, &mut dst[img * pix..][..pix]);
        }
    };
    if col.len() < PAR_THRESHOLD {
        col.chunks_mut(ncols).enumerate().for_each(row);
    } else {
        col.par_chunks_mut(ncols).enumerate().for_each(row);
    }
}

/// Writes the `ho x wo` block that kernel tap `tap` reads from the input plane `src` into `dst`.
fn tap_block(g: &ConvGeom, tap: &Tap, src: &[f32], dst: &mut [f32]) {
    let ((ylo, yhi), (xlo, xhi)) = (tap.rows, tap.cols);
    let (wo, sw) = (g.wo, g.p.stride[1]);
    if ylo == yhi || xlo == xhi {
        dst.fill(0.0);
        return;
    }
    dst[..ylo * wo].fill(0.0);
    dst[yhi * wo..].fill(0.0);
    if g.p.stride == [1, 1] && wo == g.w {
        // Stride 1 and output rows as long as input rows: the valid rows are one contiguous
        // shifted span of the plane: copy it at once, then zero the columns that wrapped in
        // from the neighbouring rows (column-major order keeps these few stores inline).
        let (start, end) = (ylo * wo + xlo, (yhi - 1) * wo + xhi);
        let s0 = tap.iy(g, ylo) * g.w + tap.ix(g, xlo);
        dst[start..end].copy_from_slice(&src[s0..s0 + (end - start)]);
        for ox in (0..xlo).chain(xhi..wo) {
            for oy in ylo..yhi {
                dst[oy * wo + ox] = 0.0;
            }
        }
        return;
    }
    for oy in ylo..yhi {
        let d = &mut dst[oy * wo..(oy + 1) * wo];
        let s = &src[tap.iy(g, oy) * g.w..][..g.w];
        d[..xlo].fill(0.0);
        d[xhi..].fill(0.0);
        let x0 = tap.ix(g, xlo);
        if sw == 1 {
            d[xlo..xhi].copy_from_slice(&s[x0..x0 + (xhi - xlo)]);
        } else {
            for (k, v) in d[xlo..xhi].iter_mut().enumerate() {
                *v = s[x0 + k * sw];
            }
        }
    }
}

/// Adds the columns `col` (layout of [`im2col`]) back into the `n` images `gx` (`[n, c, h, w]`):
/// each input pixel receives the sum of the entries that im2col copied from it. Parallel over
/// image planes; each plane sums its taps in a fixed order, so the result does not depend on the
/// thread count.
pub(super) fn col2im(g: &ConvGeom, col: &[f32], n: usize, gx: &mut [f32]) {
    let (pix, ncols, plane) = (g.out_pixels(), n * g.out_pixels(), g.in_pixels());
    if plane == 0 {
        return;
    }
    let taps = g.kh * g.kw;
    let sw = g.p.stride[1];
    let gx = &mut gx[..n * g.c * plane];
    let one = |(idx, dst): (usize, &mut [f32])| {
        let (img, ci) = (idx / g.c, idx % g.c);
        for t in 0..taps {
            let tap = Tap::new(g, t / g.kw, t % g.kw);
            let (xlo, xhi) = tap.cols;
            if xlo == xhi {
                continue;
            }
            let src = &col[(ci * taps + t) * ncols + img * pix..][..pix];
            for oy in tap.rows.0..tap.rows.1 {
                let s = &src[oy * g.wo + xlo..oy * g.wo + xhi];
                let d = &mut dst[tap.iy(g, oy) * g.w..][..g.w];
                let x0 = tap.ix(g, xlo);
                if sw == 1 {
                    d[x0..x0 + s.len()].iter_mut().zip(s).for_each(|(d, &v)| *d += v);
                } else {
                    for (k, &v) in s.iter().enumerate() {
                        d[x0 + k * sw] += v;
                    }
                }
            }
        }
    };
    if col.len() < PAR_THRESHOLD {
        gx.chunks_mut(plane).enumerate().for_each(one);
    } else {
        gx.par_chunks_mut(plane).enumerate().for_each(one);
    }
}
