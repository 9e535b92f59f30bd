//! The AVX2 packers.

use super::{ColumnTable, ConvShape, NR, PixelRun, TapOffsets};
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
    for ((base, segments), dst) in t.rows(s, x, ranges, k0).zip(out.chunks_exact_mut(NR)) {
        let (mut v0, mut v1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        match segments {
            // The common case: the whole row inside the image, two plain loads.
            [seg] if seg.lo == 0 && seg.hi == NR as i32 => {
                let p = base.wrapping_offset(seg.off);
                // SAFETY: all NR lanes lie in `x` (the caller's contract).
                unsafe {
                    v0 = _mm256_loadu_ps(p);
                    v1 = _mm256_loadu_ps(p.add(8));
                }
            }
            _ => {
                for seg in segments {
                    let p = base.wrapping_offset(seg.off);
                    // SAFETY: only the lanes lo..hi are read (the masks), and those lie in
                    // `x` (the caller's contract); masked-off lanes are never accessed.
                    unsafe {
                        let m = seg.mask.as_ptr().cast::<__m256i>();
                        if seg.lo < 8 {
                            v0 = _mm256_or_ps(v0, _mm256_maskload_ps(p, _mm256_loadu_si256(m)));
                        }
                        if seg.hi > 8 {
                            let p = p.wrapping_add(8);
                            v1 = _mm256_or_ps(v1, _mm256_maskload_ps(p, _mm256_loadu_si256(m.add(1))));
                        }
                    }
                }
            }
        }
        // SAFETY: `dst` holds NR = 16 floats.
        unsafe {
            _mm256_storeu_ps(dst.as_mut_ptr(), v0);
            _mm256_storeu_ps(dst.as_mut_ptr().add(8), v1);
        }
    }
}

/// The rows of [`TapOffsets::pack`] (its safety conditions asserted there).
///
/// # Safety
/// The CPU must have AVX2; `x` must hold the images of `s`, `runs` pixels of them.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pack_taps(t: &TapOffsets, s: &ConvShape, x: &[f32], runs: &[PixelRun], out: &mut [f32]) {
    let load = |a: &[i32; NR], half: usize| {
        // SAFETY: 8 of the NR = 16 values.
        unsafe { _mm256_loadu_si256(a.as_ptr().add(8 * half).cast()) }
    };
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let valid = [0, 8].map(|h| _mm256_cmpgt_epi32(_mm256_set1_epi32(t.valid as i32 - h), lanes));
    let (off, dy, dx) = (
        [0, 1].map(|h| load(&t.off, h)),
        [0, 1].map(|h| load(&t.dy, h)),
        [0, 1].map(|h| load(&t.dx, h)),
    );
    let (h, w) = (_mm256_set1_epi32(s.h as i32), _mm256_set1_epi32(s.w as i32));
    let minus1 = _mm256_set1_epi32(-1);
    let inside =
        |v: __m256i, n: __m256i| _mm256_and_si256(_mm256_cmpgt_epi32(v, minus1), _mm256_cmpgt_epi32(n, v));
    for ((iy, ix, base), dst) in t.pixels(s, x, runs).zip(out.chunks_exact_mut(NR)) {
        let (iyv, ixv) = (_mm256_set1_epi32(iy), _mm256_set1_epi32(ix));
        for half in 0..2 {
            let mask = _mm256_and_si256(
                valid[half],
                _mm256_and_si256(
                    inside(_mm256_add_epi32(iyv, dy[half]), h),
                    inside(_mm256_add_epi32(ixv, dx[half]), w),
                ),
            );
            // SAFETY: only lanes whose row and column lie in the image (and whose tap
            // exists) are read (the caller's contract); `dst` holds NR floats.
            unsafe {
                let v = _mm256_mask_i32gather_ps::<4>(
                    _mm256_setzero_ps(),
                    base,
                    off[half],
                    _mm256_castsi256_ps(mask),
                );
                _mm256_storeu_ps(dst.as_mut_ptr().add(8 * half), v);
            }
        }
    }
}
