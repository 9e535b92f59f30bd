//! Helpers for data-parallel loops: serial below a size where threads do not pay.

use rayon::prelude::*;

/// Elements below which elementwise loops stay on the calling thread.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// Chunk length for parallel elementwise loops.
const CHUNK: usize = 1 << 13;

/// `out[i] = f(a[i])`.
pub(crate) fn map1(a: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    if out.len() < PAR_THRESHOLD {
        out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x));
    } else {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .for_each(|(o, a)| {
                o.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x));
            });
    }
}

/// `out[i] = f(a[i], b[i])`.
pub(crate) fn map2(a: &[f32], b: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    if out.len() < PAR_THRESHOLD {
        out.iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (&x, &y))| *o = f(x, y));
    } else {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(o, (a, b))| {
                o.iter_mut()
                    .zip(a.iter().zip(b))
                    .for_each(|(o, (&x, &y))| *o = f(x, y));
            });
    }
}

/// `a[i] = f(a[i], b[i])` in place.
pub(crate) fn update2(a: &mut [f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    if a.len() < PAR_THRESHOLD {
        a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
    } else {
        a.par_chunks_mut(CHUNK)
            .zip(b.par_chunks(CHUNK))
            .for_each(|(a, b)| {
                a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
            });
    }
}
