//! The register tile of the implicit-GEMM convolution: a `MR x NR` block of outputs, each the
//! sequential chain `c = fma(a[k], b[k], c)` over the inner index `k`.
//!
//! Every output element is one chain of fused multiply-adds in the order of `k`, started from
//! the value the tile holds. Splitting the inner dimension into blocks and calling the kernel
//! once per block continues the same chain, so the result does not depend on blocking, on how
//! columns are grouped into tiles, nor on which thread runs a tile: only on the order of `k`.
//! The AVX2 kernel and the portable one compute the same chains (`_mm256_fmadd_ps` and
//! `f32::mul_add` both round once), so they agree to the bit.

/// Rows of a tile (outputs along the broadcast operand `a`).
pub(super) const MR: usize = 6;
/// Columns of a tile (outputs along the packed operand `b`, two 8-lane vectors).
pub(super) const NR: usize = 16;

/// A tile of outputs, row-major.
pub(super) type Tile = [[f32; NR]; MR];

/// A tile kernel: `c[r][j] = chain over k < kc of fma(a[r][k], b[k * NR + j], c[r][j])`, the
/// tile's row `r` at `c + r * ldc`.
#[derive(Clone, Copy)]
pub(super) struct TileKernel(unsafe fn(usize, [*const f32; MR], *const f32, *mut f32, usize));

impl TileKernel {
    /// The fastest kernel this CPU runs (AVX2 + FMA when present, otherwise the portable one).
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return TileKernel(avx2::tile);
        }
        TileKernel(tile_portable)
    }

    /// The portable kernel (tests compare it with [`TileKernel::detect`]'s).
    #[cfg(test)]
    pub(super) fn portable() -> Self {
        TileKernel(tile_portable)
    }

    /// Runs the kernel over `kc` inner indices: row `r` of `a` is `a[r][..kc]`, `b` holds `kc`
    /// rows of `NR` values. Panics when a slice is shorter than that.
    #[inline]
    pub(super) fn run(&self, kc: usize, a: [&[f32]; MR], b: &[f32], c: &mut Tile) {
        // SAFETY: a tile is MR rows of NR floats, NR apart, exclusively borrowed.
        unsafe { self.run_at(kc, a, b, c.as_mut_ptr().cast(), NR) }
    }

    /// [`TileKernel::run`] on the tile whose row `r` is the `NR` floats at `c + r * ldc`.
    ///
    /// # Safety
    /// Those `MR` rows must be valid for reads and writes and not accessed by anyone else
    /// during the call.
    #[inline]
    pub(super) unsafe fn run_at(&self, kc: usize, a: [&[f32]; MR], b: &[f32], c: *mut f32, ldc: usize) {
        if kc == 0 {
            return;
        }
        assert!(
            a.iter().all(|r| r.len() >= kc) && b.len() >= kc * NR,
            "tile operands shorter than the inner dimension"
        );
        let rows = a.map(<[f32]>::as_ptr);
        // SAFETY: every row holds at least `kc` values and `b` at least `kc * NR` (asserted);
        // the tile is valid and exclusive (caller's contract); the AVX2 kernel is only chosen
        // when the CPU has AVX2 and FMA (`detect`).
        unsafe { (self.0)(kc, rows, b.as_ptr(), c, ldc) }
    }
}

/// Where a tile's chains start.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// From the values the tile holds.
    Tile,
    /// From row `r`'s value `v[r]` (a bias), every column alike; the tile's values are ignored.
    Rows([f32; MR]),
}

/// `panels` vertically stacked tiles sharing the packed operand `b`: tile `p`'s row `r` reads
/// `a + (p * MR + r) * lda` and is the `NR` floats at `c + p * MR * ldc + r * ldc`.
#[derive(Clone, Copy)]
pub(super) struct Panels {
    /// Row 0 of the broadcast operand, from the call's first inner index.
    pub a: *const f32,
    /// Floats between consecutive rows of `a`.
    pub lda: usize,
    /// Row 0 of the first tile.
    pub c: *mut f32,
    /// Floats between consecutive rows of the output.
    pub ldc: usize,
    /// Tiles (panels of `MR` rows).
    pub count: usize,
}

impl TileKernel {
    /// Runs the kernel over `kc` inner indices on every tile of `p` (`start` gives tile `i`'s
    /// start values from `starts(i)` when not [`Start::Tile`]): the chains of
    /// [`TileKernel::run_at`] on each, without a call per tile.
    ///
    /// # Safety
    /// Every row `a + i * lda` (`i < p.count * MR`) must be valid for `kc` reads, `b` for
    /// `kc * NR`, and every tile row valid for `NR` reads and writes and not accessed by anyone
    /// else during the call.
    #[inline]
    pub(super) unsafe fn run_panels(&self, kc: usize, b: &[f32], p: Panels, starts: impl Fn(usize) -> Start) {
        assert!(
            b.len() >= kc * NR,
            "tile operand shorter than the inner dimension"
        );
        for i in 0..p.count {
            // SAFETY: the caller's contract, tile by tile.
            unsafe {
                let a = p.a.add(i * MR * p.lda);
                let rows: [*const f32; MR] = std::array::from_fn(|r| a.add(r * p.lda));
                let c = p.c.add(i * MR * p.ldc);
                if let Start::Rows(v) = starts(i) {
                    for (r, &v) in v.iter().enumerate() {
                        std::slice::from_raw_parts_mut(c.add(r * p.ldc), NR).fill(v);
                    }
                }
                if kc > 0 {
                    (self.0)(kc, rows, b.as_ptr(), c, p.ldc);
                }
            }
        }
    }
}

/// The portable kernel: the same chains with `f32::mul_add`.
///
/// # Safety
/// `a[r]` must be valid for `kc` reads, `b` for `kc * NR`, and the rows `c + r * ldc` for `NR`
/// reads and writes.
unsafe fn tile_portable(kc: usize, a: [*const f32; MR], b: *const f32, c: *mut f32, ldc: usize) {
    // SAFETY: the caller guarantees the lengths.
    let (rows, b) = unsafe {
        (
            a.map(|p| std::slice::from_raw_parts(p, kc)),
            std::slice::from_raw_parts(b, kc * NR),
        )
    };
    let mut t: Tile = [[0.0; NR]; MR];
    for (r, row) in t.iter_mut().enumerate() {
        // SAFETY: row r of the tile (caller's contract).
        row.copy_from_slice(unsafe { std::slice::from_raw_parts(c.add(r * ldc), NR) });
    }
    for (k, bk) in b.chunks_exact(NR).enumerate() {
        for (cr, row) in t.iter_mut().zip(&rows) {
            let av = row[k];
            for (cv, &bv) in cr.iter_mut().zip(bk) {
                *cv = av.mul_add(bv, *cv);
            }
        }
    }
    for (r, row) in t.iter().enumerate() {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), NR) }.copy_from_slice(row);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// The AVX2 + FMA kernel: 12 accumulators (6 rows x 2 vectors), one broadcast per row and
    /// two loads of `b` per inner index.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0 - 0.5
            })
            .collect()
    }

    #[test]
    fn detected_and_portable_kernels_agree_to_the_bit_and_chain_over_blocks() {
        let kc = 37;
        let a: Vec<Vec<f32>> = (0..MR as u32).map(|r| values(kc, r + 1)).collect();
        let b = values(kc * NR, 99);
        let rows: [&[f32]; MR] = std::array::from_fn(|r| a[r].as_slice());
        let start: Tile = std::array::from_fn(|r| std::array::from_fn(|j| (r * NR + j) as f32 * 0.01));
        let mut want = start;
        for (k, bk) in b.chunks_exact(NR).enumerate() {
            for r in 0..MR {
                for j in 0..NR {
                    want[r][j] = a[r][k].mul_add(bk[j], want[r][j]);
                }
            }
        }
        for kernel in [TileKernel::detect(), TileKernel::portable()] {
            let mut c = start;
            kernel.run(kc, rows, &b, &mut c);
            assert_eq!(c, want);
            // The same chain in two blocks of the inner index.
            let mut c = start;
            let split = 20;
            kernel.run(split, rows, &b, &mut c);
            let rest: [&[f32]; MR] = std::array::from_fn(|r| &a[r][split..]);
            kernel.run(kc - split, rest, &b[split * NR..], &mut c);
            assert_eq!(c, want);
        }
    }

    #[test]
    fn stacked_panels_run_the_chains_of_single_tiles() {
        // Three panels of MR rows of a 40-column matrix a (lda 40) and of a 20-column output c
        // (ldc 20, the tiles at column 3), started from the tile, from row values, and from
        // row values with no inner index.
        let (kc, lda, ldc, col) = (29, 40, 20, 3);
        let a = values(3 * MR * lda, 5);
        let b = values(kc * NR, 6);
        let start = values(3 * MR * ldc, 7);
        let bias: Vec<f32> = values(3 * MR, 8);
        for (use_rows, kc) in [(false, kc), (true, kc), (true, 0)] {
            let mut want = start.clone();
            for p in 0..3 {
                let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[(p * MR + r) * lda..][..kc]);
                let mut tile: Tile = std::array::from_fn(|r| {
                    std::array::from_fn(|j| match use_rows {
                        true => bias[p * MR + r],
                        false => start[(p * MR + r) * ldc + col + j],
                    })
                });
                TileKernel::portable().run(kc, rows, &b, &mut tile);
                for (r, row) in tile.iter().enumerate() {
                    want[(p * MR + r) * ldc + col..][..NR].copy_from_slice(row);
                }
            }
            for kernel in [TileKernel::detect(), TileKernel::portable()] {
                let mut c = start.clone();
                let panels = Panels {
                    a: a.as_ptr(),
                    lda,
                    c: c[col..].as_mut_ptr(),
                    ldc,
                    count: 3,
                };
                let starts = |p: usize| match use_rows {
                    true => Start::Rows(std::array::from_fn(|r| bias[p * MR + r])),
                    false => Start::Tile,
                };
                // SAFETY: 3 * MR rows of lda >= kc values; the tiles lie inside c.
                unsafe { kernel.run_panels(kc, &b, panels, starts) };
                assert_eq!(c, want, "rows {use_rows}, kc {kc}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "shorter")]
    fn short_operands_panic() {
        let a = [0f32; 3];
        let b = [0f32; 4 * NR];
        let mut c = [[0f32; NR]; MR];
        TileKernel::detect().run(4, [&a; MR], &b, &mut c);
    }
}
