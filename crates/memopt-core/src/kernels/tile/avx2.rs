//! The AVX2 + FMA tile kernel.

use super::{MR, NR};
use std::arch::x86_64::*;

/// `MR x NR` outputs in 12 accumulators (6 rows x 2 vectors), one broadcast per row and two
/// loads of `b` per inner index.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `a[r]` must be valid for `kc` reads, `b` for `kc * NR`,
/// and the rows `c + r * ldc` for `NR` reads and writes.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile(kc: usize, a: [*const f32; MR], b: *const f32, cp: *mut f32, ldc: usize) {
    // SAFETY: all pointer accesses stay within the lengths the caller guarantees.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2 * MR];
        for (r, pair) in acc.chunks_exact_mut(2).enumerate() {
            pair[0] = _mm256_loadu_ps(cp.add(r * ldc));
            pair[1] = _mm256_loadu_ps(cp.add(r * ldc + 8));
        }
        let [a0, a1, a2, a3, a4, a5] = a;
        let [
            mut c00,
            mut c01,
            mut c10,
            mut c11,
            mut c20,
            mut c21,
            mut c30,
            mut c31,
            mut c40,
            mut c41,
            mut c50,
            mut c51,
        ] = acc;
        let mut bp = b;
        for k in 0..kc {
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            bp = bp.add(NR);
            let v = _mm256_broadcast_ss(&*a0.add(k));
            c00 = _mm256_fmadd_ps(v, b0, c00);
            c01 = _mm256_fmadd_ps(v, b1, c01);
            let v = _mm256_broadcast_ss(&*a1.add(k));
            c10 = _mm256_fmadd_ps(v, b0, c10);
            c11 = _mm256_fmadd_ps(v, b1, c11);
            let v = _mm256_broadcast_ss(&*a2.add(k));
            c20 = _mm256_fmadd_ps(v, b0, c20);
            c21 = _mm256_fmadd_ps(v, b1, c21);
            let v = _mm256_broadcast_ss(&*a3.add(k));
            c30 = _mm256_fmadd_ps(v, b0, c30);
            c31 = _mm256_fmadd_ps(v, b1, c31);
            let v = _mm256_broadcast_ss(&*a4.add(k));
            c40 = _mm256_fmadd_ps(v, b0, c40);
            c41 = _mm256_fmadd_ps(v, b1, c41);
            let v = _mm256_broadcast_ss(&*a5.add(k));
            c50 = _mm256_fmadd_ps(v, b0, c50);
            c51 = _mm256_fmadd_ps(v, b1, c51);
        }
        let acc = [c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51];
        for (r, pair) in acc.chunks_exact(2).enumerate() {
            _mm256_storeu_ps(cp.add(r * ldc), pair[0]);
            _mm256_storeu_ps(cp.add(r * ldc + 8), pair[1]);
        }
    }
}
