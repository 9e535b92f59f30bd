//! The implicit GEMM's promise, checked to the bit: every output element is one chain of
//! fused multiply-adds over the inner index in order (forward, input gradient), or over the
//! pixels of the images in the order given (weight gradient), whatever the packing, blocking,
//! tile tails and threads.

use super::super::implicit::{flip_weights, forward, input_grad, input_grad_is_conv, weight_grad};
use super::super::pack::ConvShape;
use crate::cpu_isa::CpuIsa;
use proptest::prelude::*;

/// Values with all kinds of low bits (so that any other order of the chain rounds differently).
fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761).rotate_left(13) ^ seed;
            (h >> 8) as f32 / 8_388_608.0 - 1.0
        })
        .collect()
}

/// The shape of `[b, c, h, w]` images under a `co x c x kh x kw` kernel.
#[allow(clippy::too_many_arguments)]
fn shape(
    [b, c, h, w]: [usize; 4],
    co: usize,
    [kh, kw]: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
) -> Option<ConvShape> {
    let out = |n: usize, k: usize, s: usize, p: usize, d: usize| {
        (n + 2 * p).checked_sub(d * (k - 1) + 1).map(|v| v / s + 1)
    };
    Some(ConvShape {
        b,
        c,
        h,
        w,
        co,
        kh,
        kw,
        stride,
        pad,
        dil,
        ho: out(h, kh, stride[0], pad[0], dil[0])?,
        wo: out(w, kw, stride[1], pad[1], dil[1])?,
    })
}

/// The input value under output pixel `(oy, ox)` and tap `(ci, ky, kx)` of image `img` (0 in
/// the padding), as im2col writes it.
fn col(
    s: &ConvShape,
    x: &[f32],
    img: usize,
    (ci, ky, kx): (usize, usize, usize),
    (oy, ox): (usize, usize),
) -> f32 {
    let iy = (oy * s.stride[0] + ky * s.dil[0]).checked_sub(s.pad[0]);
    let ix = (ox * s.stride[1] + kx * s.dil[1]).checked_sub(s.pad[1]);
    match (iy, ix) {
        (Some(iy), Some(ix)) if iy < s.h && ix < s.w => x[((img * s.c + ci) * s.h + iy) * s.w + ix],
        _ => 0.0,
    }
}

/// The taps in the order of the inner index.
fn taps(s: &ConvShape) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    (0..s.c).flat_map(move |ci| (0..s.kh).flat_map(move |ky| (0..s.kw).map(move |kx| (ci, ky, kx))))
}

/// The forward as scalar chains: `out = fma(w[co, k], col[k], ...)` from the bias, k in order.
fn forward_chains(s: &ConvShape, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (k, pix) = (s.k(), s.pix());
    let mut out = vec![0f32; s.b * s.co * pix];
    for img in 0..s.b {
        for co in 0..s.co {
            for p in 0..pix {
                let mut acc = bias.map_or(0.0, |b| b[co]);
                for (i, tap) in taps(s).enumerate() {
                    acc = w[co * k + i].mul_add(col(s, x, img, tap, (p / s.wo, p % s.wo)), acc);
                }
                out[(img * s.co + co) * pix + p] = acc;
            }
        }
    }
    out
}

/// The weight gradient as scalar chains from `dw`: over the images of `images` in order, each
/// image's pixels in order.
fn weight_grad_chains(s: &ConvShape, grad: &[f32], x: &[f32], images: &[usize], dw: &mut [f32]) {
    let (k, pix) = (s.k(), s.pix());
    for co in 0..s.co {
        for (i, tap) in taps(s).enumerate() {
            let mut acc = dw[co * k + i];
            for &img in images {
                for p in 0..pix {
                    let v = col(s, x, img, tap, (p / s.wo, p % s.wo));
                    acc = grad[(img * s.co + co) * pix + p].mul_add(v, acc);
                }
            }
            dw[co * k + i] = acc;
        }
    }
}

/// The paths this CPU runs; those it lacks are named on stderr as skipped.
fn paths() -> Vec<CpuIsa> {
    CpuIsa::ALL
        .into_iter()
        .filter(|isa| {
            let ok = isa.available();
            if !ok {
                eprintln!("skipped: the {isa} convolution path (this CPU lacks its instructions)");
            }
            ok
        })
        .collect()
}

/// Runs the three implicit kernels on `s` on every path and compares them bit for bit with the
/// chains.
fn check(s: &ConvShape, seed: u32) {
    for isa in paths() {
        check_path(isa, s, seed);
    }
}

/// [`check`] on path `isa`.
fn check_path(isa: CpuIsa, s: &ConvShape, seed: u32) {
    let x = values(s.b * s.in_len(), seed);
    let w = values(s.co * s.k(), seed ^ 0x55);
    let bias = values(s.co, seed ^ 0xaa);
    let grad = values(s.b * s.co * s.pix(), seed ^ 0x33);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for b in [None, Some(bias.as_slice())] {
        let mut out = vec![f32::NAN; s.b * s.co * s.pix()];
        forward(isa, s, &x, &w, b, &mut out);
        assert_eq!(
            bits(&out),
            bits(&forward_chains(s, &x, &w, b)),
            "{isa} forward {s:?}"
        );
    }
    // Images in a scrambled order, from a non-zero accumulator.
    let images: Vec<usize> = (0..s.b).rev().collect();
    let start = values(s.co * s.k(), seed ^ 0x77);
    let (mut dw, mut want) = (start.clone(), start);
    weight_grad(isa, s, &grad, &x, &images, &mut dw);
    weight_grad_chains(s, &grad, &x, &images, &mut want);
    assert_eq!(bits(&dw), bits(&want), "{isa} weight gradient {s:?}");
    if input_grad_is_conv(s) {
        let mut flipped = vec![0f32; s.c * s.co * s.kh * s.kw];
        flip_weights(s, &w, &mut flipped);
        let mut gx = vec![f32::NAN; s.b * s.in_len()];
        input_grad(isa, s, &grad, &flipped, &mut gx);
        // The input gradient is the forward of the transposed convolution of the gradient.
        let t = shape(
            [s.b, s.co, s.ho, s.wo],
            s.c,
            [s.kh, s.kw],
            [1, 1],
            [s.kh - 1 - s.pad[0], s.kw - 1 - s.pad[1]],
            [1, 1],
        )
        .expect("the transposed convolution of a valid one");
        let taps = s.kh * s.kw;
        for ci in 0..s.c {
            for o in 0..s.co {
                for tap in 0..taps {
                    let want = w[(o * s.c + ci) * taps + taps - 1 - tap];
                    assert_eq!(flipped[(ci * s.co + o) * taps + tap].to_bits(), want.to_bits());
                }
            }
        }
        assert_eq!(
            bits(&gx),
            bits(&forward_chains(&t, &grad, &flipped, None)),
            "{isa} input gradient {s:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn implicit_kernels_are_the_fma_chains_to_the_bit(
        (b, c, co) in (1usize..=3, 1usize..=6, 1usize..=14),
        (h, w) in (1usize..=20, 1usize..=20),
        (kh, kw) in (1usize..=3, 1usize..=3),
        stride in proptest::array::uniform2(1usize..=2),
        pad in proptest::array::uniform2(0usize..=2),
        dil in proptest::array::uniform2(1usize..=2),
        seed in any::<u32>(),
    ) {
        if let Some(s) = shape([b, c, h, w], co, [kh, kw], stride, pad, dil) {
            check(&s, seed);
        }
    }
}

#[test]
fn implicit_kernels_are_the_fma_chains_on_large_blocked_parallel_shapes() {
    // Inner dimensions over one block (576, 1152), columns over several column blocks and
    // rows across output rows (widths 48, 24, 12, 6, 11), partial row panels (co % 6 != 0),
    // and enough work to run in parallel.
    for (dims, co) in [
        ([2, 64, 12, 12], 14),
        ([2, 16, 24, 24], 20),
        ([3, 128, 6, 6], 13),
        ([1, 8, 48, 48], 16),
        ([2, 30, 11, 11], 9),
    ] {
        let s = shape(dims, co, [3, 3], [1, 1], [1, 1], [1, 1]).expect("a valid shape");
        check(&s, 7);
    }
}

/// The vector packers of every path write exactly the scalar packers' panels (over every
/// column panel and inner block of `s`), where the CPU has them.
fn check_packers(s: &ConvShape, seed: u32) {
    for isa in paths().into_iter().filter(|&isa| isa >= CpuIsa::Avx2) {
        check_packers_of(isa, s, seed);
    }
}

/// [`check_packers`] on path `isa`.
fn check_packers_of(isa: CpuIsa, s: &ConvShape, seed: u32) {
    use super::super::pack::{PanelCols, PixelRun, pack_columns, pack_taps};
    use super::super::pack_simd::{ColumnTable, TapOffsets};
    use crate::kernels::tile::NR;
    let x = values(s.b * s.in_len(), seed);
    let (k, ncols) = (s.k(), s.b * s.pix());
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let cols: Vec<PanelCols> = (0..ncols).step_by(NR).map(|j0| PanelCols::new(s, j0)).collect();
    if let Some(table) = ColumnTable::new(isa, s, cols.iter()) {
        for (m, pc) in cols.iter().enumerate() {
            for (k0, kc) in [(0, k), (k / 3, k - k / 3)] {
                let (mut want, mut got) = (vec![f32::NAN; kc * NR], vec![f32::NAN; kc * NR]);
                pack_columns(s, &x, pc, k0, kc, &mut want);
                table.pack(s, &x, m, k0, kc, &mut got);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{isa} columns {j0} from {k0}, {s:?}",
                    j0 = m * NR
                );
            }
        }
    }
    // All pixels, as runs of at most 7 across images.
    let runs: Vec<PixelRun> = (0..s.b)
        .flat_map(|img| {
            (0..s.pix()).step_by(7).map(move |p0| PixelRun {
                img,
                p0,
                len: 7.min(s.pix() - p0),
            })
        })
        .collect();
    for k0 in (0..k).step_by(NR) {
        if let Some(offsets) = TapOffsets::new(isa, s, k0) {
            let (mut want, mut got) = (vec![f32::NAN; ncols * NR], vec![f32::NAN; ncols * NR]);
            pack_taps(s, &x, &runs, k0, &mut want);
            offsets.pack(s, &x, &runs, &mut got);
            assert_eq!(bits(&got), bits(&want), "{isa} taps from {k0}, {s:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn vector_packing_writes_the_scalar_panels(
        (b, c) in (1usize..=3, 1usize..=6),
        (h, w) in (1usize..=30, 1usize..=30),
        (kh, kw) in (1usize..=3, 1usize..=3),
        stride in proptest::array::uniform2(1usize..=2),
        pad in proptest::array::uniform2(0usize..=2),
        dil in proptest::array::uniform2(1usize..=2),
        seed in any::<u32>(),
    ) {
        if let Some(s) = shape([b, c, h, w], 1, [kh, kw], stride, pad, dil) {
            check_packers(&s, seed);
        }
    }
}
