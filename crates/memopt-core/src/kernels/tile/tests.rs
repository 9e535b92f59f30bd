//! The tile kernels of every path against the portable chains.

use super::*;

/// The kernel of every path this CPU runs, the portable one first, with its path; the paths
/// it lacks are named on stderr as skipped.
fn kernels() -> Vec<(CpuIsa, TileKernel)> {
    CpuIsa::ALL
        .into_iter()
        .filter_map(|isa| {
            let k = TileKernel::for_isa(isa);
            if k.is_none() {
                eprintln!("skipped: the {isa} tile kernel (this CPU lacks its instructions)");
            }
            k.map(|k| (isa, k))
        })
        .collect()
}

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0 - 0.5)
        .collect()
}

#[test]
fn every_path_is_the_fma_chain_to_the_bit_and_chains_over_blocks() {
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
    for (isa, kernel) in kernels() {
        let mut c = start;
        kernel.run(kc, rows, &b, &mut c);
        assert_eq!(c, want, "{}", isa);
        // The same chain in two blocks of the inner index.
        let mut c = start;
        let split = 20;
        kernel.run(split, rows, &b, &mut c);
        let rest: [&[f32]; MR] = std::array::from_fn(|r| &a[r][split..]);
        kernel.run(kc - split, rest, &b[split * NR..], &mut c);
        assert_eq!(c, want, "{} in two blocks", isa);
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
        for (isa, kernel) in kernels() {
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
            assert_eq!(c, want, "{}: rows {use_rows}, kc {kc}", isa);
        }
    }
}

#[test]
#[should_panic(expected = "shorter")]
fn short_operands_panic() {
    let a = [0f32; 3];
    let b = [0f32; 4 * NR];
    let mut c = [[0f32; NR]; MR];
    for (_, kernel) in kernels() {
        kernel.run(4, [&a; MR], &b, &mut c);
    }
}
