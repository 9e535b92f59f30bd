use super::*;
use crate::kernels::GradNeeds;
use crate::kernels::testkit::{
    assert_close, assert_meta_matches_cpu, batch_norm_backward_with, batch_norm_train_with, central_diff,
    cpu, dot, tensor, values,
};
use crate::{DType, Device};
use proptest::prelude::*;

/// A random BatchNorm case: dims `[B, C, *spatial]` with spatial of rank 0, 1 or 2 and at least
/// two values per channel, inputs offset by up to +-50 (to exercise cancellation), and optional
/// affine parameters and running statistics.
#[derive(Debug, Clone)]
struct Case {
    dims: Vec<usize>,
    x: Vec<f32>,
    g: Vec<f32>,
    weight: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    running: Option<(Vec<f32>, Vec<f32>)>,
    momentum: f32,
    eps: f32,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..4, 1usize..4, prop::collection::vec(1usize..5, 0..3)).prop_flat_map(|(b, c, spatial)| {
        let s: usize = spatial.iter().product();
        let b = if b * s < 2 { 2 } else { b };
        let mut dims = vec![b, c];
        dims.extend(spatial);
        let n = b * c * s;
        (
            Just(dims),
            prop::collection::vec(-3.0f32..3.0, n),
            -50.0f32..50.0,
            prop::collection::vec(-2.0f32..2.0, n),
            prop::option::of(prop::collection::vec(0.5f32..2.0, c)),
            prop::option::of(prop::collection::vec(-1.0f32..1.0, c)),
            prop::option::of((
                prop::collection::vec(-1.0f32..1.0, c),
                prop::collection::vec(0.5f32..2.0, c),
            )),
            0.0f32..1.0,
            prop_oneof![Just(1e-5f32), Just(1e-3f32), Just(0.0f32)],
        )
            .prop_map(
                |(dims, x, offset, g, weight, bias, running, momentum, eps)| Case {
                    dims,
                    x: x.iter().map(|v| v + offset).collect(),
                    g,
                    weight,
                    bias,
                    running,
                    momentum,
                    eps,
                },
            )
    })
}

/// `[B, C, S]` of dims.
fn bcs(dims: &[usize]) -> (usize, usize, usize) {
    (dims[0], dims[1], dims[2..].iter().product())
}

/// f64 reference statistics: (mean, biased var) per channel.
fn naive_stats(x: &[f32], dims: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let (b, c, s) = bcs(dims);
    let m = (b * s) as f64;
    let mut mean = vec![0f64; c];
    let mut var = vec![0f64; c];
    for ch in 0..c {
        let vals = (0..b).flat_map(|i| (0..s).map(move |k| (i * c + ch) * s + k));
        let vals: Vec<f64> = vals.map(|j| x[j] as f64).collect();
        mean[ch] = vals.iter().sum::<f64>() / m;
        var[ch] = vals.iter().map(|v| (v - mean[ch]).powi(2)).sum::<f64>() / m;
    }
    (mean, var)
}

/// f64 reference forward: `(x - mean) * invstd * w + b` with per-channel statistics.
fn naive_normalize(
    x: &[f32],
    dims: &[usize],
    mean: &[f64],
    invstd: &[f64],
    w: Option<&[f32]>,
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let (_, c, s) = bcs(dims);
    x.iter()
        .enumerate()
        .map(|(j, &v)| {
            let ch = (j / s) % c;
            let w = w.map_or(1.0, |w| w[ch] as f64);
            let b = bias.map_or(0.0, |b| b[ch] as f64);
            (v as f64 - mean[ch]) * invstd[ch] * w + b
        })
        .collect()
}

/// f64 reference backward: (grad_x, grad_weight, grad_bias).
fn naive_backward(
    g: &[f32],
    x: &[f32],
    dims: &[usize],
    w: Option<&[f32]>,
    eps: f32,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (b, c, s) = bcs(dims);
    let m = (b * s) as f64;
    let (mean, var) = naive_stats(x, dims);
    let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps as f64).sqrt()).collect();
    let ch_of = |j: usize| (j / s) % c;
    let xhat = |j: usize| (x[j] as f64 - mean[ch_of(j)]) * invstd[ch_of(j)];
    let mut sum_g = vec![0f64; c];
    let mut sum_gx = vec![0f64; c];
    for j in 0..x.len() {
        sum_g[ch_of(j)] += g[j] as f64;
        sum_gx[ch_of(j)] += g[j] as f64 * xhat(j);
    }
    let gx = (0..x.len())
        .map(|j| {
            let ch = ch_of(j);
            let w = w.map_or(1.0, |w| w[ch] as f64);
            invstd[ch] * w * (g[j] as f64 - sum_g[ch] / m - xhat(j) * sum_gx[ch] / m)
        })
        .collect();
    (gx, sum_gx, sum_g)
}

fn opt(v: &Option<Vec<f32>>, c: usize) -> Option<Tensor> {
    v.as_ref().map(|v| cpu(v, &[c]))
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn train_matches_naive(k in case()) {
        let c = k.dims[1];
        let x = cpu(&k.x, &k.dims).with_spike_flag(true);
        let (w, b) = (opt(&k.weight, c), opt(&k.bias, c));
        let run = k.running.as_ref().map(|(m, v)| (cpu(m, &[c]), cpu(v, &[c])));
        let out = batch_norm_train_with(&x, w.as_ref(), b.as_ref(), run.as_ref().map(|(mean, var)| RunningStats { mean, var }), k.momentum, k.eps)
        .unwrap();
        let (mean, var) = naive_stats(&k.x, &k.dims);
        let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + k.eps as f64).sqrt()).collect();
        assert_close(&out.save_mean.to_vec_f32().unwrap(), &mean, 1e-6, 1e-6, "save_mean");
        assert_close(&out.save_invstd.to_vec_f32().unwrap(), &invstd, 1e-5, 0.0, "save_invstd");
        let want = naive_normalize(&k.x, &k.dims, &mean, &invstd, k.weight.as_deref(), k.bias.as_deref());
        // x - mean loses the digits of the +-50 offset in f32: absolute error ~ 4e-6 * invstd.
        let atol = 1e-5 * invstd.iter().cloned().fold(1.0, f64::max);
        assert_close(&out.y.to_vec_f32().unwrap(), &want, 1e-5, atol, "y");
        prop_assert_eq!(out.y.dims(), &k.dims[..]);
        prop_assert!(!out.y.is_spike());
        prop_assert_eq!(out.y.kind(), MemoryKind::Activation);
        if let (Some((rm0, rv0)), Some((rm, rv))) = (&k.running, &run) {
            let (b, _, s) = bcs(&k.dims);
            let (mo, n) = (k.momentum as f64, (b * s) as f64);
            let want_m: Vec<f64> = (0..c).map(|i| (1.0 - mo) * rm0[i] as f64 + mo * mean[i]).collect();
            let want_v: Vec<f64> = (0..c).map(|i| (1.0 - mo) * rv0[i] as f64 + mo * var[i] * n / (n - 1.0)).collect();
            assert_close(&rm.to_vec_f32().unwrap(), &want_m, 1e-6, 1e-6, "running mean");
            assert_close(&rv.to_vec_f32().unwrap(), &want_v, 1e-5, 1e-6, "running var");
        }
    }

    #[test]
    fn eval_matches_naive(k in case()) {
        let c = k.dims[1];
        let (rm, rv) = k.running.clone().unwrap_or((vec![0.5; c], vec![1.5; c]));
        let (w, b) = (opt(&k.weight, c), opt(&k.bias, c));
        let y = batch_norm_eval(&cpu(&k.x, &k.dims), w.as_ref(), b.as_ref(), RunningStats { mean: &cpu(&rm, &[c]), var: &cpu(&rv, &[c]) }, k.eps).unwrap();
        let invstd: Vec<f64> = rv.iter().map(|&v| 1.0 / (v as f64 + k.eps as f64).sqrt()).collect();
        let want = naive_normalize(&k.x, &k.dims, &f64s(&rm), &invstd, k.weight.as_deref(), k.bias.as_deref());
        assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5, 1e-5, "eval y");
        prop_assert!(!y.is_spike());
    }

    #[test]
    fn backward_matches_naive(k in case(), input in any::<bool>(), weight in any::<bool>(), bias in any::<bool>()) {
        let c = k.dims[1];
        let x = cpu(&k.x, &k.dims);
        let w = opt(&k.weight, c);
        let fwd = batch_norm_train_with(&x, w.as_ref(), None, None, 0.1, k.eps).unwrap();
        let needs = GradNeeds { input, weight, bias };
        let grads = batch_norm_backward_with(&cpu(&k.g, &k.dims), &x, w.as_ref(), &fwd.save_mean, &fwd.save_invstd, needs).unwrap();
        let (gx, gw, gb) = naive_backward(&k.g, &k.x, &k.dims, k.weight.as_deref(), k.eps);
        prop_assert_eq!(grads.x.is_some(), input);
        prop_assert_eq!(grads.weight.is_some(), weight);
        prop_assert_eq!(grads.bias.is_some(), bias);
        // Tolerances scale with invstd (large when a channel is nearly constant).
        let (_, var) = naive_stats(&k.x, &k.dims);
        let scale = var.iter().map(|v| 1.0 / (v + k.eps as f64).sqrt()).fold(1.0, f64::max);
        if let Some(t) = grads.x {
            prop_assert_eq!(t.kind(), MemoryKind::Gradient);
            prop_assert_eq!(t.dims(), &k.dims[..]);
            assert_close(&t.to_vec_f32().unwrap(), &gx, 1e-4, 1e-5 * scale * scale, "grad x");
        }
        if let Some(t) = grads.weight {
            assert_close(&t.to_vec_f32().unwrap(), &gw, 1e-4, 1e-5 * scale, "grad weight");
        }
        if let Some(t) = grads.bias {
            assert_close(&t.to_vec_f32().unwrap(), &gb, 1e-6, 1e-6, "grad bias");
        }
    }
}

/// Checks grad x, weight and bias of `sum(y * r)` against central differences.
fn finite_difference_check(dims: &[usize], affine: bool) {
    let n: usize = dims.iter().product();
    let c = dims[1];
    let x = values(n, 11);
    let r = values(n, 12);
    let w0: Vec<f32> = values(c, 13).iter().map(|v| 1.0 + 0.5 * v).collect();
    let b0 = values(c, 14);
    let loss = |xv: &[f32], wv: &[f32], bv: &[f32]| {
        let (w, b) = (cpu(wv, &[c]), cpu(bv, &[c]));
        let (w, b) = if affine {
            (Some(&w), Some(&b))
        } else {
            (None, None)
        };
        let y = batch_norm_train_with(&cpu(xv, dims), w, b, None, 0.1, 1e-5)
            .unwrap()
            .y;
        dot(&y.to_vec_f32().unwrap(), &r)
    };
    let xt = cpu(&x, dims);
    let wt = cpu(&w0, &[c]);
    let w = affine.then_some(&wt);
    let fwd = batch_norm_train_with(&xt, w, None, None, 0.1, 1e-5).unwrap();
    let g = batch_norm_backward_with(
        &cpu(&r, dims),
        &xt,
        w,
        &fwd.save_mean,
        &fwd.save_invstd,
        GradNeeds::ALL,
    )
    .unwrap();
    let fd_x = central_diff(&x, 1e-2, |v| loss(v, &w0, &b0));
    assert_close(&g.x.unwrap().to_vec_f32().unwrap(), &fd_x, 2e-2, 2e-3, "grad x");
    if affine {
        let fd_w = central_diff(&w0, 1e-2, |v| loss(&x, v, &b0));
        assert_close(
            &g.weight.unwrap().to_vec_f32().unwrap(),
            &fd_w,
            1e-2,
            1e-3,
            "grad weight",
        );
        let fd_b = central_diff(&b0, 1e-2, |v| loss(&x, &w0, v));
        assert_close(
            &g.bias.unwrap().to_vec_f32().unwrap(),
            &fd_b,
            1e-2,
            1e-3,
            "grad bias",
        );
    }
}

#[test]
fn backward_matches_finite_differences_2d() {
    finite_difference_check(&[2, 3, 3, 3], true);
}

#[test]
fn backward_matches_finite_differences_1d() {
    finite_difference_check(&[6, 4], false);
    finite_difference_check(&[3, 2, 5], true);
}

#[test]
fn large_offset_input_is_accurate_and_thread_count_independent() {
    let dims = [8, 3, 40, 40];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = values(n, 21).iter().map(|v| 1000.0 + 0.01 * v).collect();
    let xt = cpu(&x, &dims);
    let out = batch_norm_train_with(&xt, None, None, None, 0.1, 1e-5).unwrap();
    let (mean, var) = naive_stats(&x, &dims);
    let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + 1e-5).sqrt()).collect();
    assert_close(&out.save_mean.to_vec_f32().unwrap(), &mean, 1e-7, 0.0, "mean");
    assert_close(
        &out.save_invstd.to_vec_f32().unwrap(),
        &invstd,
        1e-5,
        0.0,
        "invstd",
    );
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let one = pool.install(|| batch_norm_train_with(&xt, None, None, None, 0.1, 1e-5).unwrap());
    assert_eq!(
        one.save_invstd.to_vec_f32().unwrap(),
        out.save_invstd.to_vec_f32().unwrap()
    );
    assert_eq!(one.y.to_vec_f32().unwrap(), out.y.to_vec_f32().unwrap());
    let g = cpu(&values(n, 22), &dims);
    let back = |fwd: &BatchNormOutput| {
        let r = batch_norm_backward_with(&g, &xt, None, &fwd.save_mean, &fwd.save_invstd, GradNeeds::ALL)
            .unwrap();
        (
            r.x.unwrap().to_vec_f32().unwrap(),
            r.weight.unwrap().to_vec_f32().unwrap(),
        )
    };
    assert_eq!(pool.install(|| back(&one)), back(&out));
}

#[test]
fn running_stats_update_only_when_given() {
    let x = cpu(&[1.0, 2.0, 3.0, 5.0], &[4, 1]);
    let (rm, rv) = (cpu(&[0.0], &[1]), cpu(&[1.0], &[1]));
    let out = batch_norm_train_with(
        &x,
        None,
        None,
        Some(RunningStats { mean: &rm, var: &rv }),
        0.1,
        1e-5,
    )
    .unwrap();
    // mean 2.75, biased var 2.1875, unbiased 2.916666...
    assert_close(&rm.to_vec_f32().unwrap(), &[0.275], 1e-6, 0.0, "running mean");
    assert_close(
        &rv.to_vec_f32().unwrap(),
        &[0.9 + 0.1 * 35.0 / 12.0],
        1e-6,
        0.0,
        "running var",
    );
    assert_close(&out.save_mean.to_vec_f32().unwrap(), &[2.75], 0.0, 0.0, "mean");
    batch_norm_train_with(&x, None, None, None, 0.1, 1e-5).unwrap();
    assert_close(
        &rm.to_vec_f32().unwrap(),
        &[0.275],
        1e-6,
        0.0,
        "unchanged running mean",
    );
}

#[test]
fn meta_records_the_same_events_as_cpu() {
    assert_meta_matches_cpu(|dev| {
        let dims = [4, 8, 12, 12];
        let n: usize = dims.iter().product();
        let x = tensor(values(n, 1), &dims, dev);
        let g = tensor(values(n, 2), &dims, dev);
        let w = tensor(vec![1.5f32; 8], &[8], dev);
        let b = tensor(vec![0.5f32; 8], &[8], dev);
        let rm = tensor(vec![0.0f32; 8], &[8], dev);
        let rv = tensor(vec![1.0f32; 8], &[8], dev);
        let out = batch_norm_train_with(
            &x,
            Some(&w),
            Some(&b),
            Some(RunningStats { mean: &rm, var: &rv }),
            0.1,
            1e-5,
        )
        .unwrap();
        let ev = batch_norm_eval(&x, Some(&w), Some(&b), RunningStats { mean: &rm, var: &rv }, 1e-5).unwrap();
        let all =
            batch_norm_backward_with(&g, &x, Some(&w), &out.save_mean, &out.save_invstd, GradNeeds::ALL)
                .unwrap();
        let some = GradNeeds {
            input: true,
            weight: false,
            bias: false,
        };
        let only_x =
            batch_norm_backward_with(&g, &x, Some(&w), &out.save_mean, &out.save_invstd, some).unwrap();
        assert!(only_x.weight.is_none() && only_x.bias.is_none());
        let x1 = tensor(values(40, 3), &[10, 4], dev);
        let o1 = batch_norm_train_with(&x1, None, None, None, 0.1, 1e-5).unwrap();
        [
            &out.y,
            &out.save_mean,
            &out.save_invstd,
            &ev,
            all.x.as_ref().unwrap(),
            all.weight.as_ref().unwrap(),
            all.bias.as_ref().unwrap(),
            only_x.x.as_ref().unwrap(),
            &o1.y,
        ]
        .iter()
        .map(|t| t.dims().to_vec())
        .collect()
    });
}

#[test]
fn errors_name_the_problem() {
    let x = cpu(&values(24, 1), &[2, 3, 4]);
    let e = |r: Result<BatchNormOutput>| r.err().map(|e| e.to_string()).unwrap_or_default();
    let msg = e(batch_norm_train_with(
        &cpu(&[1.0, 2.0], &[2]),
        None,
        None,
        None,
        0.1,
        1e-5,
    ));
    assert!(
        msg.contains("batch_norm_train") && msg.contains("[B, C]"),
        "{msg}"
    );
    let w = cpu(&[1.0; 2], &[2]);
    let msg = e(batch_norm_train_with(&x, Some(&w), None, None, 0.1, 1e-5));
    assert!(
        msg.contains("weight of shape [3]") && msg.contains("got [2]"),
        "{msg}"
    );
    let msg = e(batch_norm_train_with(
        &cpu(&[1.0; 3], &[1, 3]),
        None,
        None,
        None,
        0.1,
        1e-5,
    ));
    assert!(msg.contains("more than 1 value per channel"), "{msg}");
    let msg = e(batch_norm_train_with(&x, None, None, None, 0.1, -1.0));
    assert!(msg.contains("eps"), "{msg}");
    let msg = e(batch_norm_train_with(&x, None, None, None, 1.5, 1e-5));
    assert!(msg.contains("momentum"), "{msg}");
    let rm = cpu(&[0.0; 3], &[3]);
    let msg = e(batch_norm_train_with(
        &x,
        None,
        None,
        Some(RunningStats { mean: &rm, var: &rm }),
        0.1,
        1e-5,
    ));
    assert!(msg.contains("share storage"), "{msg}");
    let rv = cpu(&[1.0; 3], &[3]);
    let xv = cpu(&[0.0; 6], &[2, 3]);
    let alias = xv.narrow0(0, 1).unwrap().reshape([3]).unwrap();
    let msg = e(batch_norm_train_with(
        &xv,
        None,
        None,
        Some(RunningStats {
            mean: &alias,
            var: &rv,
        }),
        0.1,
        1e-5,
    ));
    assert!(msg.contains("share storage with x"), "{msg}");
    // Distinct buffers are fine.
    assert!(
        batch_norm_train_with(
            &x,
            None,
            None,
            Some(RunningStats { mean: &rv, var: &rm }),
            0.1,
            1e-5
        )
        .is_ok()
    );
    let h = x.to_dtype(DType::F16).unwrap();
    let msg = e(batch_norm_train_with(&h, None, None, None, 0.1, 1e-5));
    assert!(msg.contains("expected dtype f32, got f16"), "{msg}");
    let msg = batch_norm_eval(
        &x,
        None,
        None,
        RunningStats {
            mean: &rm,
            var: &cpu(&[1.0; 2], &[2]),
        },
        1e-5,
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("running var of shape [3]"), "{msg}");
    let fwd = batch_norm_train_with(&x, None, None, None, 0.1, 1e-5).unwrap();
    let bad_g = cpu(&values(12, 2), &[2, 3, 2]);
    let msg = batch_norm_backward_with(&bad_g, &x, None, &fwd.save_mean, &fwd.save_invstd, GradNeeds::ALL)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("grad_y of x's shape [2, 3, 4]") && msg.contains("[2, 3, 2]"),
        "{msg}"
    );
    let msg = batch_norm_backward_with(&x, &x, None, &w, &fwd.save_invstd, GradNeeds::ALL)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("save_mean of shape [3]"), "{msg}");
    let meta = tensor(vec![0f32; 3], &[3], Device::META);
    let msg = e(batch_norm_train_with(&x, Some(&meta), None, None, 0.1, 1e-5));
    assert!(msg.contains("different devices"), "{msg}");
}
