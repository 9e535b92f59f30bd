//! The AVX-512 tile kernels: a row of `NR = 16` outputs is one 512-bit accumulator. Tiles are
//! run one or two at a time (`MR` or `2 * MR` rows) and over one or two column blocks (two
//! packed operands `b`, outputs at two places), so that up to `4 * MR` independent chains keep
//! both FMA units busy and each broadcast of `a` feeds two FMAs. Each chain is the one the
//! portable kernel computes (`_mm512_fmadd_ps` rounds once, as `f32::mul_add`), so the bits are
//! the same.

use super::{MR, NR};
use std::arch::x86_64::*;

/// One tile: `MR x NR` outputs, row `r` reading `a[r]`.
///
/// # Safety
/// The CPU must have AVX-512F; `a[r]` must be valid for `kc` reads, `b` for `kc * NR`, and the
/// rows `c + r * ldc` for `NR` reads and writes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile(kc: usize, a: [*const f32; MR], b: *const f32, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { rows::<MR, 1>(kc, a, [b], [c], ldc) }
}

/// `R` rows of stacked tiles (row `r` reading `a + r * lda`) over `W` column blocks (block `w`
/// reading `b[w]`, its row `r` the `NR` floats at `c[w] + r * ldc`).
///
/// # Safety
/// The CPU must have AVX-512F; every row `a + r * lda` (`r < R`) must be valid for `kc` reads,
/// each `b[w]` for `kc * NR`, and the rows `c[w] + r * ldc` for `NR` reads and writes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn panels<const R: usize, const W: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: [*const f32; W],
    c: [*mut f32; W],
    ldc: usize,
) {
    // SAFETY: the caller's contract; the row pointers stay inside the rows it names.
    unsafe {
        let a: [*const f32; R] = std::array::from_fn(|r| a.add(r * lda));
        rows::<R, W>(kc, a, b, c, ldc)
    }
}

/// `R` rows of `W` column blocks: `c[w][r][j] = chain over k < kc of fma(a[r][k],
/// b[w][k * NR + j], c[w][r][j])`, one accumulator per row and block.
///
/// # Safety
/// As [`panels`], for the rows `a[r]`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rows<const R: usize, const W: usize>(
    kc: usize,
    a: [*const f32; R],
    b: [*const f32; W],
    c: [*mut f32; W],
    ldc: usize,
) {
    // SAFETY: all pointer accesses stay within the lengths the caller guarantees.
    unsafe {
        let mut acc: [[__m512; W]; R] =
            std::array::from_fn(|r| std::array::from_fn(|w| _mm512_loadu_ps(c[w].add(r * ldc))));
        for k in 0..kc {
            let bv: [__m512; W] = std::array::from_fn(|w| _mm512_loadu_ps(b[w].add(k * NR)));
            for (acc, row) in acc.iter_mut().zip(&a) {
                let av = _mm512_set1_ps(*row.add(k));
                for (acc, bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_fmadd_ps(av, *bv, *acc);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (w, acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(c[w].add(r * ldc), *acc);
            }
        }
    }
}
