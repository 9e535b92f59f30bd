//! The chunked entry points against the whole-batch kernels: bit-identical over any split of
//! the batch into consecutive parts, Meta allocating as the CPU, and errors that name the
//! problem.

use super::*;
use crate::MemoryKind;
use crate::kernels::GradNeeds;
use crate::kernels::testkit::{
    assert_meta_matches_cpu, batch_norm_backward_with, batch_norm_train_with, cpu, tensor, values,
};
use proptest::prelude::*;

/// `B` split at the sorted, deduplicated `cuts` (each in `1..B`) into consecutive parts.
fn parts(b: usize, cuts: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c % b).filter(|&c| c > 0).collect();
    points.sort_unstable();
    points.dedup();
    points.push(b);
    let mut start = 0;
    points
        .into_iter()
        .map(|end| {
            let r = start..end;
            start = end;
            r
        })
        .collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Everything the chunked path computes, over `parts`, as bits.
struct Chunked {
    mean: Vec<u32>,
    invstd: Vec<u32>,
    running: (Vec<u32>, Vec<u32>),
    y: Vec<u32>,
    gw: Vec<u32>,
    gb: Vec<u32>,
    gx: Vec<u32>,
}

fn run_chunked(x: &Tensor, g: &Tensor, w: &Tensor, b: &Tensor, split: &[std::ops::Range<usize>]) -> Chunked {
    let c = x.dims()[1];
    let (rm, rv) = (cpu(&vec![0.25; c], &[c]), cpu(&vec![1.5; c], &[c]));
    let mut sums = None;
    for r in split {
        sums = Some(batch_norm_stat_sums(&x.narrow0(r.start, r.len()).unwrap(), sums).unwrap());
    }
    let sums = sums.unwrap();
    assert_eq!(sums.count(), x.elem_count() / c);
    let stats =
        batch_norm_stats_finish(&sums, Some(RunningStats { mean: &rm, var: &rv }), 0.1, 1e-5).unwrap();
    let mut y = Vec::new();
    for r in split {
        let part =
            batch_norm_normalize(&x.narrow0(r.start, r.len()).unwrap(), Some(w), Some(b), &stats).unwrap();
        y.extend(bits(&part));
    }
    let mut gsums = None;
    for r in split.iter().rev() {
        let (gp, xp) = (
            g.narrow0(r.start, r.len()).unwrap(),
            x.narrow0(r.start, r.len()).unwrap(),
        );
        gsums = Some(batch_norm_grad_sums(&gp, &xp, &stats.mean, gsums).unwrap());
    }
    let gsums = gsums.unwrap();
    let pg = batch_norm_param_grads(&gsums, &stats.invstd, true, true).unwrap();
    let mut gx = vec![Vec::new(); split.len()];
    for (i, r) in split.iter().enumerate().rev() {
        // A handed-over copy, so the in-place path runs too.
        let gp = g
            .narrow0(r.start, r.len())
            .unwrap()
            .deep_copy(MemoryKind::Gradient)
            .unwrap();
        let part = batch_norm_backward_input(BatchNormBackwardInput {
            grad_y: gp.into(),
            x: &x.narrow0(r.start, r.len()).unwrap(),
            weight: Some(w),
            stats: &stats,
            sums: &gsums,
        })
        .unwrap();
        assert_eq!(part.kind(), MemoryKind::Gradient);
        gx[i] = bits(&part);
    }
    Chunked {
        mean: bits(&stats.mean),
        invstd: bits(&stats.invstd),
        running: (bits(&rm), bits(&rv)),
        y,
        gw: bits(pg.weight.as_ref().unwrap()),
        gb: bits(pg.bias.as_ref().unwrap()),
        gx: gx.concat(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn parts_in_order_are_bit_identical_to_the_whole_batch(
        b in 1usize..9,
        c in 1usize..4,
        s in 1usize..7,
        offset in -60.0f32..60.0,
        cuts in prop::collection::vec(0usize..9, 0..4),
        seed in 0u64..1000,
    ) {
        let b = if b * s < 2 { 2 } else { b };
        let dims = [b, c, s];
        let n = b * c * s;
        let x = cpu(&values(n, seed).iter().map(|v| v * 3.0 + offset).collect::<Vec<_>>(), &dims);
        let g = cpu(&values(n, seed + 1), &dims);
        let w = cpu(&values(c, seed + 2).iter().map(|v| 1.0 + v).collect::<Vec<_>>(), &[c]);
        let bias = cpu(&values(c, seed + 3), &[c]);
        let (rm, rv) = (cpu(&vec![0.25; c], &[c]), cpu(&vec![1.5; c], &[c]));
        let whole = batch_norm_train_with(&x, Some(&w), Some(&bias), Some(RunningStats { mean: &rm, var: &rv }), 0.1, 1e-5).unwrap();
        let grads = batch_norm_backward_with(&g, &x, Some(&w), &whole.save_mean, &whole.save_invstd, GradNeeds::ALL).unwrap();
        let got = run_chunked(&x, &g, &w, &bias, &parts(b, &cuts));
        prop_assert_eq!(got.mean, bits(&whole.save_mean));
        prop_assert_eq!(got.invstd, bits(&whole.save_invstd));
        prop_assert_eq!(got.running, (bits(&rm), bits(&rv)));
        prop_assert_eq!(got.y, bits(&whole.y));
        prop_assert_eq!(got.gw, bits(grads.weight.as_ref().unwrap()));
        prop_assert_eq!(got.gb, bits(grads.bias.as_ref().unwrap()));
        prop_assert_eq!(got.gx, bits(grads.x.as_ref().unwrap()));
    }
}

#[test]
fn one_pass_statistics_stay_accurate_far_from_zero() {
    // Mean 1e4 against a spread of 1e-2: unshifted one-pass sums would lose the variance.
    let dims = [6, 2, 50];
    let n: usize = dims.iter().product();
    let xs: Vec<f32> = values(n, 5).iter().map(|v| 1e4 + 0.01 * v).collect();
    let x = cpu(&xs, &dims);
    let out = batch_norm_train_with(&x, None, None, None, 0.1, 0.0).unwrap();
    for ch in 0..2 {
        let vals: Vec<f64> = (0..6)
            .flat_map(|b| (0..50).map(move |k| (b * 2 + ch) * 50 + k))
            .map(|j| xs[j] as f64)
            .collect();
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64;
        let got = out.save_invstd.to_vec_f32().unwrap()[ch] as f64;
        let want = 1.0 / var.sqrt();
        assert!(
            (got - want).abs() <= 1e-5 * want,
            "channel {ch}: invstd {got} vs {want}"
        );
    }
}

#[test]
fn meta_records_the_same_events_as_cpu() {
    assert_meta_matches_cpu(|dev| {
        let dims = [4, 3, 5, 5];
        let n: usize = dims.iter().product();
        let x = tensor(values(n, 1), &dims, dev);
        let g = tensor(values(n, 2), &dims, dev);
        let w = tensor(vec![1.5f32; 3], &[3], dev);
        let (rm, rv) = (
            tensor(vec![0.0f32; 3], &[3], dev),
            tensor(vec![1.0f32; 3], &[3], dev),
        );
        let first = batch_norm_stat_sums(&x.narrow0(0, 3).unwrap(), None).unwrap();
        let sums = batch_norm_stat_sums(&x.narrow0(3, 1).unwrap(), Some(first)).unwrap();
        let stats =
            batch_norm_stats_finish(&sums, Some(RunningStats { mean: &rm, var: &rv }), 0.1, 1e-5).unwrap();
        drop(sums);
        let y = batch_norm_normalize(&x.narrow0(1, 2).unwrap(), Some(&w), None, &stats).unwrap();
        let last = batch_norm_grad_sums(
            &g.narrow0(2, 2).unwrap(),
            &x.narrow0(2, 2).unwrap(),
            &stats.mean,
            None,
        )
        .unwrap();
        let gsums = batch_norm_grad_sums(
            &g.narrow0(0, 2).unwrap(),
            &x.narrow0(0, 2).unwrap(),
            &stats.mean,
            Some(last),
        )
        .unwrap();
        let pg = batch_norm_param_grads(&gsums, &stats.invstd, true, false).unwrap();
        let lent = batch_norm_backward_input(BatchNormBackwardInput {
            grad_y: (&g.narrow0(0, 2).unwrap()).into(),
            x: &x.narrow0(0, 2).unwrap(),
            weight: Some(&w),
            stats: &stats,
            sums: &gsums,
        })
        .unwrap();
        let given = g.narrow0(2, 2).unwrap().deep_copy(MemoryKind::Gradient).unwrap();
        let reused = batch_norm_backward_input(BatchNormBackwardInput {
            grad_y: given.into(),
            x: &x.narrow0(2, 2).unwrap(),
            weight: None,
            stats: &stats,
            sums: &gsums,
        })
        .unwrap();
        assert!(pg.bias.is_none());
        [&stats.mean, &y, pg.weight.as_ref().unwrap(), &lent, &reused]
            .iter()
            .map(|t| t.dims().to_vec())
            .collect()
    });
}

#[test]
fn errors_name_the_problem() {
    let x = cpu(&values(24, 1), &[2, 3, 4]);
    let sums = batch_norm_stat_sums(&x, None).unwrap();
    let other = cpu(&values(16, 2), &[2, 2, 4]);
    let msg = batch_norm_stat_sums(&other, Some(sums)).unwrap_err().to_string();
    assert!(
        msg.contains("the sums' 3 channels") && msg.contains("[2, 2, 4]"),
        "{msg}"
    );
    let empty = cpu(&[], &[0, 3, 4]);
    let msg = batch_norm_stat_sums(&empty, None).unwrap_err().to_string();
    assert!(msg.contains("first part of a batch needs a sample"), "{msg}");
    let one = batch_norm_stat_sums(&cpu(&[1.0, 2.0, 3.0], &[1, 3]), None).unwrap();
    let msg = batch_norm_stats_finish(&one, None, 0.1, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("more than 1 value per channel"), "{msg}");
    let sums = batch_norm_stat_sums(&x, None).unwrap();
    let stats = batch_norm_stats_finish(&sums, None, 0.1, 1e-5).unwrap();
    let rm = cpu(&[0.0; 3], &[3]);
    let msg = batch_norm_stats_finish(&sums, Some(RunningStats { mean: &rm, var: &rm }), 0.1, 1e-5)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("share storage"), "{msg}");
    let half = batch_norm_grad_sums(
        &x.narrow0(1, 1).unwrap(),
        &x.narrow0(1, 1).unwrap(),
        &stats.mean,
        None,
    )
    .unwrap();
    let msg = batch_norm_backward_input(BatchNormBackwardInput {
        grad_y: (&x).into(),
        x: &x,
        weight: None,
        stats: &stats,
        sums: &half,
    })
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("cover 4 values per channel, the statistics 8") && msg.contains("every part"),
        "{msg}"
    );
    let msg = batch_norm_normalize(&other, None, None, &stats)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("mean of shape [2]"), "{msg}");
}
