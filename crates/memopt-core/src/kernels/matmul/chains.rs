//! The linear layer's forward on the CPU as chains: `out[i, j]` continues from the value it
//! holds (the bias, or 0) with `fma(x[i, l], w[j, l], .)` for `l = 0..K` in order, one chain
//! per element, computed whole by one task with the tiles of [`TileKernel`].
//!
//! A row's result therefore depends on its own input row and the weight only: not on how many
//! rows a call holds, on blocking, threads or the vector path. So one call over every time
//! step's rows gives the bits of one call per time step (`linear_stepwise`) and of any chunk of
//! steps, and the weight is packed once per call instead of once per step.

use crate::cpu_isa::CpuIsa;
use crate::kernels::tile::blocking::{
    KC, NC, Shared, even_blocks, panel_rows, row_groups, run_owned_tiles, run_tasks, with_panel,
};
use crate::kernels::tile::{MR, NR, Start, Tile, TileKernel};

/// `out[i, j] = chain over l < k of fma(x[i, l], w[j, l], out[i, j])` for the row-major `x`
/// (`m x k`), `w` (`n x k`, PyTorch's weight layout) and `out` (`m x n`), on path `isa`.
pub(crate) fn linear_forward(
    isa: CpuIsa,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    assert!(
        x.len() >= m * k && w.len() >= n * k && out.len() >= m * n,
        "linear chains: operands shorter than the shape"
    );
    let kernel = TileKernel::for_isa(isa).unwrap_or_else(TileKernel::portable);
    let mc = kernel.panels_per_group();
    let col_blocks = n.div_ceil(NC);
    let groups = row_groups(m.div_ceil(MR), col_blocks);
    let tasks: Vec<(usize, (usize, usize))> = (0..col_blocks)
        .flat_map(|cb| groups.iter().map(move |&g| (cb, g)))
        .collect();
    let out = Shared::new(out);
    let kc_max = even_blocks(k).1;
    run_tasks(&tasks, m * n * k, |&(cb, (p0, p1))| {
        let n0 = cb * NC;
        let micro = (n - n0).min(NC).div_ceil(NR);
        // Panels p0..full hold MR rows each; a last partial panel goes through a tile copy.
        let full = p1.min(m / MR).max(p0);
        // Micro-panel `mm` holds NR columns of the output.
        let whole = |mm: usize| n0 + (mm + 1) * NR <= n;
        with_panel(|panel| {
            for k0 in (0..k).step_by(kc_max) {
                let kc = kc_max.min(k - k0);
                // The weight's rows n0.. as packed columns: b[l * NR + j] = w[n0 + j, k0 + l].
                for mm in 0..micro {
                    let dst = &mut panel[mm * KC * NR..][..kc * NR];
                    for j in 0..NR {
                        let col = n0 + mm * NR + j;
                        if col < n {
                            for (l, &v) in w[col * k + k0..][..kc].iter().enumerate() {
                                dst[l * NR + j] = v;
                            }
                        } else {
                            (0..kc).for_each(|l| dst[l * NR + j] = 0.0);
                        }
                    }
                }
                let b = |mm: usize| &panel[mm * KC * NR..][..kc * NR];
                for pb in (p0..p1).step_by(mc) {
                    let pe = (pb + mc).min(p1);
                    let (fb, fe) = (pb.min(full), pe.min(full));
                    let mut mm = 0;
                    while mm < micro {
                        let width = if whole(mm) && mm + 1 < micro && whole(mm + 1) {
                            2
                        } else {
                            1
                        };
                        let j0 = n0 + mm * NR;
                        if whole(mm) && fe > fb {
                            // Rows fb * MR.. of the input, from inner index k0.
                            let a = &x[fb * MR * k + k0..(fe * MR - 1) * k + k0 + kc];
                            let bs = [b(mm), if width == 2 { b(mm + 1) } else { &[] }];
                            // SAFETY: this task alone owns rows p0..p1 x columns of block cb of
                            // the output, so the tiles of panels fb..fe of these micro-panels.
                            unsafe {
                                run_owned_tiles(
                                    &kernel,
                                    kc,
                                    (a, k),
                                    &bs[..width],
                                    (&out, fb * MR * n + j0, n),
                                    fe - fb,
                                    |_| Start::Tile,
                                );
                            }
                        }
                        // The edges: partial panels, and every panel of a partial micro-panel.
                        for mm in mm..mm + width {
                            let j0 = n0 + mm * NR;
                            let valid_cols = (n - j0).min(NR);
                            let first = if whole(mm) { fe.max(pb) } else { pb };
                            for p in first..pe {
                                let rows = panel_rows(p, m);
                                let valid_rows = (m - p * MR).min(MR);
                                let a: [&[f32]; MR] = rows.map(|r| &x[r * k + k0..][..kc]);
                                let mut tile: Tile = [[0.0; NR]; MR];
                                for (row, &r) in tile.iter_mut().zip(&rows).take(valid_rows) {
                                    // SAFETY: as above.
                                    unsafe { out.read(r * n + j0, &mut row[..valid_cols]) };
                                }
                                kernel.run(kc, a, b(mm), &mut tile);
                                for (row, &r) in tile.iter().zip(&rows).take(valid_rows) {
                                    // SAFETY: as above.
                                    unsafe { out.write(r * n + j0, &row[..valid_cols]) };
                                }
                            }
                        }
                        mm += width;
                    }
                }
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0 - 0.5
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// The chains, one element at a time.
    fn chains(x: &[f32], w: &[f32], start: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = start.to_vec();
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    out[i * n + j] = x[i * k + l].mul_add(w[j * k + l], out[i * n + j]);
                }
            }
        }
        out
    }

    /// Every path the CPU runs gives the chains to the bit, and so does any split of the rows
    /// into calls (as time steps are split into chunks).
    fn check(m: usize, k: usize, n: usize, split: usize, seed: u32) {
        let (x, w, start) = (
            values(m * k, seed),
            values(n * k, seed ^ 0x55),
            values(m * n, seed ^ 0xaa),
        );
        let want = bits(&chains(&x, &w, &start, m, k, n));
        for isa in CpuIsa::ALL {
            if !isa.available() {
                eprintln!("skipped: the {isa} linear path (this CPU lacks its instructions)");
                continue;
            }
            let mut out = start.clone();
            linear_forward(isa, &x, &w, &mut out, m, k, n);
            assert_eq!(bits(&out), want, "{isa} {m}x{k}x{n}");
            let split = split.min(m);
            let mut out = start.clone();
            let (top, bottom) = out.split_at_mut(split * n);
            linear_forward(isa, &x[split * k..], &w, bottom, m - split, k, n);
            linear_forward(isa, &x, &w, top, split, k, n);
            assert_eq!(bits(&out), want, "{isa} {m}x{k}x{n} split at row {split}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn every_element_is_its_chain_whatever_the_rows_of_a_call(
            (m, k, n) in (1usize..=40, 1usize..=300, 1usize..=70),
            split in 0usize..=40,
            seed in any::<u32>(),
        ) {
            check(m, k, n, split, seed);
        }
    }

    #[test]
    fn large_parallel_products_are_their_chains() {
        // Several column blocks and row groups, inner blocks over KC, partial panels and columns.
        for (m, k, n, split) in [(512, 512, 512, 96), (130, 700, 137, 7), (64, 576, 10, 32)] {
            check(m, k, n, split, 3);
        }
    }
}
