//! The AVX-512 packers: the panels of the AVX2 ones, bit for bit (values are only copied), a
//! packed row of `NR = 16` lanes in one 512-bit register: one masked load per segment, one
//! 16-lane masked gather per pixel. A masked-off lane is never accessed.

use super::{ColumnTable, ConvShape, NR, PixelRun, TapOffsets};
use std::arch::x86_64::*;

/// The packed rows `k0..k0 + out.len() / NR` of the micro-panel whose tap ranges are
/// `ranges`: each row its segments' masked loads merged (lanes outside every segment are 0).
///
/// # Safety
/// The CPU must have AVX-512F; every lane `lo..hi` of every segment, at every channel below
/// `s.c`, must lie in `x` (what [`ColumnTable::new`] asserts).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack(
    t: &ColumnTable,
    s: &ConvShape,
    x: &[f32],
    ranges: &[(u32, u32)],
    k0: usize,
    out: &mut [f32],
) {
    for ((base, segments), dst) in t.rows(s, x, ranges, k0).zip(out.chunks_exact_mut(NR)) {
        let mut v = _mm512_setzero_ps();
        for seg in segments {
            let p = base.wrapping_offset(seg.off);
            // SAFETY: only the lanes lo..hi are read (the mask), and those lie in `x` (the
            // caller's contract); segments cover disjoint lanes, so merging is their OR.
            v = unsafe { _mm512_mask_loadu_ps(v, seg.lanes(), p) };
        }
        // SAFETY: `dst` holds NR = 16 floats.
        unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), v) };
    }
}

/// The rows of [`TapOffsets::pack`] (its safety conditions asserted there).
///
/// # Safety
/// The CPU must have AVX-512F; `x` must hold the images of `s`, `runs` pixels of them.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_taps(t: &TapOffsets, s: &ConvShape, x: &[f32], runs: &[PixelRun], out: &mut [f32]) {
    // SAFETY: each array holds NR = 16 i32.
    let load = |a: &[i32; NR]| unsafe { _mm512_loadu_si512(a.as_ptr().cast()) };
    let (off, dy, dx) = (load(&t.off), load(&t.dy), load(&t.dx));
    let valid: __mmask16 = if t.valid >= NR {
        0xFFFF
    } else {
        ((1u32 << t.valid) - 1) as u16
    };
    // 0 <= v < n as one unsigned comparison (coordinates and sizes fit in i32: `new`).
    let (h, w) = (_mm512_set1_epi32(s.h as i32), _mm512_set1_epi32(s.w as i32));
    for ((iy, ix, base), dst) in t.pixels(s, x, runs).zip(out.chunks_exact_mut(NR)) {
        let rowv = _mm512_add_epi32(_mm512_set1_epi32(iy), dy);
        let colv = _mm512_add_epi32(_mm512_set1_epi32(ix), dx);
        let mask = valid & _mm512_cmplt_epu32_mask(rowv, h) & _mm512_cmplt_epu32_mask(colv, w);
        // SAFETY: only lanes whose row and column lie in the image (and whose tap exists)
        // are read (the caller's contract); `dst` holds NR floats.
        unsafe {
            let v = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, off, base);
            _mm512_storeu_ps(dst.as_mut_ptr(), v);
        }
    }
}
