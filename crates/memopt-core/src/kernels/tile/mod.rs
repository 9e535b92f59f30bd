//! The register tile of the CPU's chain GEMMs (the implicit-GEMM convolution, the linear
//! layer): a `MR x NR` block of outputs, each the
//! sequential chain `c = fma(a[k], b[k], c)` over the inner index `k`.
//!
//! Every output element is one chain of fused multiply-adds in the order of `k`, started from
//! the value the tile holds. Splitting the inner dimension into blocks and calling the kernel
//! once per block continues the same chain, so the result does not depend on blocking, on how
//! columns are grouped into tiles, nor on which thread runs a tile: only on the order of `k`.
//! Every path ([`CpuIsa`]) computes the same chains (`_mm256_fmadd_ps`, `_mm512_fmadd_ps`
//! and `f32::mul_add` all round once), so they agree to the bit.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(crate) mod blocking;
#[cfg(test)]
mod tests;

use crate::cpu_isa::CpuIsa;

/// Rows of a tile (outputs along the broadcast operand `a`).
pub(crate) const MR: usize = 6;
/// Columns of a tile (outputs along the packed operand `b`, two 8-lane vectors).
pub(crate) const NR: usize = 16;

/// A tile of outputs, row-major.
pub(crate) type Tile = [[f32; NR]; MR];

/// The kernel of one tile: `(kc, rows of a, b, c, ldc)`.
type TileFn = unsafe fn(usize, [*const f32; MR], *const f32, *mut f32, usize);

/// The kernel of stacked tiles over `W` column blocks: `(kc, a, lda, b, c, ldc)`, row `r`
/// reading `a + r * lda`, block `w` reading `b[w]` and writing row `r` at `c[w] + r * ldc`.
type StackedFn<const W: usize> = unsafe fn(usize, *const f32, usize, [*const f32; W], [*mut f32; W], usize);

/// The kernels of a path with registers for more than one tile at a time.
#[derive(Clone, Copy)]
struct Stacked {
    /// Two tiles (`2 * MR` rows), one column block.
    two: StackedFn<1>,
    /// One tile, two column blocks.
    wide: StackedFn<2>,
    /// Two tiles, two column blocks.
    two_wide: StackedFn<2>,
}

/// A tile kernel: `c[r][j] = chain over k < kc of fma(a[r][k], b[k * NR + j], c[r][j])`, the
/// tile's row `r` at `c + r * ldc`.
#[derive(Clone, Copy)]
pub(crate) struct TileKernel {
    tile: TileFn,
    /// Several tiles at once, where the path has registers for them.
    stacked: Option<Stacked>,
}

impl TileKernel {
    /// The kernel of path `isa`, or `None` where this CPU lacks it.
    pub(crate) fn for_isa(isa: CpuIsa) -> Option<Self> {
        if !isa.available() {
            return None;
        }
        match isa {
            CpuIsa::Portable => Some(Self::portable()),
            #[cfg(target_arch = "x86_64")]
            CpuIsa::Avx2 => Some(TileKernel {
                tile: avx2::tile,
                stacked: None,
            }),
            #[cfg(target_arch = "x86_64")]
            CpuIsa::Avx512 => Some(TileKernel {
                tile: avx512::tile,
                stacked: Some(Stacked {
                    two: avx512::panels::<{ 2 * MR }, 1>,
                    wide: avx512::panels::<MR, 2>,
                    two_wide: avx512::panels::<{ 2 * MR }, 2>,
                }),
            }),
            #[cfg(not(target_arch = "x86_64"))]
            _ => None,
        }
    }

    /// The portable kernel.
    pub(crate) fn portable() -> Self {
        TileKernel {
            tile: tile_portable,
            stacked: None,
        }
    }

    /// Tile panels of rows (`MR` rows each) a task walks as one group while the tiles walk
    /// the packed micro-panels of a column block: their operand `a` stays in cache meanwhile.
    /// Two for the stacked AVX-512 kernels (`2 * MR x KC` f32 = 12 KiB, in L1: best of 6 rounds
    /// on a [8, 256, 24, 24] 3x3 layer, forward 258-267 GFLOP/s against 165-209 with 16
    /// panels, backward 258-259 against 226-236, 2 threads); `blocking::MC` (16, in L2) for
    /// the others, which run one tile at a time (2 panels made the AVX2 path slower).
    pub(crate) fn panels_per_group(&self) -> usize {
        if self.stacked.is_some() { 2 } else { blocking::MC }
    }

    /// Runs the kernel over `kc` inner indices: row `r` of `a` is `a[r][..kc]`, `b` holds `kc`
    /// rows of `NR` values. Panics when a slice is shorter than that.
    #[inline]
    pub(crate) fn run(&self, kc: usize, a: [&[f32]; MR], b: &[f32], c: &mut Tile) {
        // SAFETY: a tile is MR rows of NR floats, NR apart, exclusively borrowed.
        unsafe { self.run_at(kc, a, b, c.as_mut_ptr().cast(), NR) }
    }

    /// [`TileKernel::run`] on the tile whose row `r` is the `NR` floats at `c + r * ldc`.
    ///
    /// # Safety
    /// Those `MR` rows must be valid for reads and writes and not accessed by anyone else
    /// during the call.
    #[inline]
    pub(crate) unsafe fn run_at(&self, kc: usize, a: [&[f32]; MR], b: &[f32], c: *mut f32, ldc: usize) {
        if kc == 0 {
            return;
        }
        assert!(
            a.iter().all(|r| r.len() >= kc) && b.len() >= kc * NR,
            "tile operands shorter than the inner dimension"
        );
        let rows = a.map(<[f32]>::as_ptr);
        // SAFETY: every row holds at least `kc` values and `b` at least `kc * NR` (asserted);
        // the tile is valid and exclusive (caller's contract); a vector kernel is only chosen
        // when the CPU has its instructions (`for_isa`).
        unsafe { (self.tile)(kc, rows, b.as_ptr(), c, ldc) }
    }
}

/// Where a tile's chains start.
#[derive(Clone, Copy)]
pub(crate) enum Start {
    /// From the values the tile holds.
    Tile,
    /// From row `r`'s value `v[r]` (a bias), every column alike; the tile's values are ignored.
    Rows([f32; MR]),
}

/// `panels` vertically stacked tiles sharing the packed operand `b`: tile `p`'s row `r` reads
/// `a + (p * MR + r) * lda` and is the `NR` floats at `c + p * MR * ldc + r * ldc`.
#[derive(Clone, Copy)]
pub(crate) struct Panels {
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
    pub(crate) unsafe fn run_panels(&self, kc: usize, b: &[f32], p: Panels, starts: impl Fn(usize) -> Start) {
        // SAFETY: the caller's contract.
        unsafe { self.run_blocks(kc, &[b], &[p.c], p, starts) }
    }

    /// [`TileKernel::run_panels`] over two column blocks: the tiles of `p` with `b[0]`, and
    /// the tiles at `c1` (row `r` of tile `i` at `c1 + (i * MR + r) * p.ldc`) with `b[1]`.
    ///
    /// # Safety
    /// As [`TileKernel::run_panels`], for both blocks.
    #[inline]
    pub(crate) unsafe fn run_panels_wide(
        &self,
        kc: usize,
        b: [&[f32]; 2],
        p: Panels,
        c1: *mut f32,
        starts: impl Fn(usize) -> Start,
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.run_blocks(kc, &b, &[p.c, c1], p, starts) }
    }

    /// The tiles of `p` over the column blocks `c` (block `w`'s tile `i` at `c[w] + i * MR *
    /// ldc`, read `b[w]`): stacked kernels where the path has them, single tiles otherwise.
    ///
    /// # Safety
    /// As [`TileKernel::run_panels`], for every block.
    #[inline]
    unsafe fn run_blocks(
        &self,
        kc: usize,
        b: &[&[f32]],
        c: &[*mut f32],
        p: Panels,
        starts: impl Fn(usize) -> Start,
    ) {
        assert!(
            b.iter().all(|b| b.len() >= kc * NR),
            "tile operand shorter than the inner dimension"
        );
        // SAFETY (every block below): the caller's contract, tile by tile; a vector kernel
        // is only chosen when the CPU has its instructions (`for_isa`).
        let start = |i: usize| -> [*mut f32; 2] {
            let start = starts(i);
            let mut at = [std::ptr::null_mut(); 2];
            for (at, &c) in at.iter_mut().zip(c) {
                unsafe {
                    *at = c.add(i * MR * p.ldc);
                    if let Start::Rows(v) = start {
                        for (r, &v) in v.iter().enumerate() {
                            std::slice::from_raw_parts_mut(at.add(r * p.ldc), NR).fill(v);
                        }
                    }
                }
            }
            at
        };
        let a = |i: usize| unsafe { p.a.add(i * MR * p.lda) };
        let mut i = 0;
        if let Some(k) = self.stacked.filter(|_| kc > 0) {
            let bp = [b[0].as_ptr(), b[b.len() - 1].as_ptr()];
            while i + 2 <= p.count {
                let at = start(i);
                start(i + 1);
                unsafe {
                    match b.len() {
                        1 => (k.two)(kc, a(i), p.lda, [bp[0]], [at[0]], p.ldc),
                        _ => (k.two_wide)(kc, a(i), p.lda, bp, at, p.ldc),
                    }
                }
                i += 2;
            }
            if b.len() == 2 && i < p.count {
                let at = start(i);
                unsafe { (k.wide)(kc, a(i), p.lda, bp, at, p.ldc) };
                i += 1;
            }
        }
        for i in i..p.count {
            let at = start(i);
            if kc > 0 {
                let rows: [*const f32; MR] = std::array::from_fn(|r| unsafe { a(i).add(r * p.lda) });
                for (b, at) in b.iter().zip(at) {
                    unsafe { (self.tile)(kc, rows, b.as_ptr(), at, p.ldc) };
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
