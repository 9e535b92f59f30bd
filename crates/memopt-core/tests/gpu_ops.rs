//! Elementwise ops, reductions, losses, optimizers and dropout on the GPU against the CPU
//! kernels, through the public op API, on random inputs, odd sizes and views (non-zero storage
//! offsets). Kernels made of add/mul/div/sqrt and every f64 sum in the CPU's order must be
//! bit-identical; ops using exp/log, and sums blocked differently on CUDA
//! (`Target::sum_block`), within 1e-5 relative. Each test skips with the reason when
//! there is no GPU, and fails under MEMOPT_REQUIRE_GPU=1.

mod gpu_common;

use gpu_common::*;
use memopt_core::kernels::*;
use memopt_core::{Device, Philox, RngState, Tensor};

#[test]
fn elementwise_ops_and_backwards_are_bit_identical() {
    if !gpu_or_skip("elementwise_ops_and_backwards_are_bit_identical") {
        return;
    }
    for (j, &n) in ODD_SIZES.iter().enumerate() {
        let dims = [n, 1];
        let seed = j as u64;
        let (a, ga) = twin(&values(n, seed, 3.0), &dims);
        let (b, gb) = twin(&values(n, seed + 100, 3.0), &dims);
        let (s, gs) = twin(&spikes(n, seed, 2), &dims);
        let (s, gs) = (s.with_spike_flag(true), gs.with_spike_flag(true));
        let id = |what: &str, c: Tensor, g: Tensor| assert_identical(&format!("{what} n={n}"), &c, &g);
        id("add", add(&a, &b).unwrap(), add(&ga, &gb).unwrap());
        id("mul", mul(&a, &b).unwrap(), mul(&ga, &gb).unwrap());
        id("mul spikes", mul(&s, &s).unwrap(), mul(&gs, &gs).unwrap());
        id("scale", scale(&a, 0.3).unwrap(), scale(&ga, 0.3).unwrap());
        id("relu", relu(&a).unwrap(), relu(&ga).unwrap());
        id(
            "relu_backward",
            relu_backward(&b, &a).unwrap(),
            relu_backward(&gb, &ga).unwrap(),
        );
        id(
            "mul_backward",
            mul_backward(&b, &a).unwrap(),
            mul_backward(&gb, &ga).unwrap(),
        );
        id(
            "scale_backward",
            scale_backward(&a, -1.5).unwrap(),
            scale_backward(&ga, -1.5).unwrap(),
        );
        let (y, gy) = (sigmoid(&a).unwrap(), sigmoid(&ga).unwrap());
        assert_close(&format!("sigmoid n={n}"), &y, &gy, 1e-5);
        // The backward from the same y (the CPU's), so only the backward's arithmetic is compared.
        let gy_cpu = y.to_device(GPU).unwrap();
        id(
            "sigmoid_backward",
            sigmoid_backward(&b, &y).unwrap(),
            sigmoid_backward(&gb, &gy_cpu).unwrap(),
        );
        let (acc, gacc) = twin(&values(n, seed + 7, 1.0), &dims);
        add_assign(&acc, &a).unwrap();
        add_assign(&gacc, &ga).unwrap();
        id("add_assign", acc.clone(), gacc.clone());
        assign(&acc, &b).unwrap();
        assign(&gacc, &gb).unwrap();
        id("assign", acc, gacc);
    }
}

#[test]
fn reductions_and_broadcasts_are_bit_identical() {
    if !gpu_or_skip("reductions_and_broadcasts_are_bit_identical") {
        return;
    }
    for (j, &n) in ODD_SIZES.iter().enumerate() {
        let (x, gx) = twin(&values(n, j as u64, 2.0), &[n]);
        assert_identical(
            &format!("sum_all n={n}"),
            &sum_all(&x).unwrap(),
            &sum_all(&gx).unwrap(),
        );
        assert_identical(
            &format!("mean_all n={n}"),
            &mean_all(&x).unwrap(),
            &mean_all(&gx).unwrap(),
        );
    }
    for dims in [
        [3usize, 5, 7],
        [1, 16_385, 1],
        [40, 2500, 1],
        [7, 3, 1],
        [2, 9, 33],
    ] {
        let n = dims.iter().product();
        let (x, gx) = twin(&values(n, 11, 2.0), &dims);
        for dim in 0..3 {
            let what = format!("{dims:?} dim {dim}");
            assert_identical(
                &format!("sum_dim {what}"),
                &sum_dim(&x, dim).unwrap(),
                &sum_dim(&gx, dim).unwrap(),
            );
            assert_identical(
                &format!("mean_dim {what}"),
                &mean_dim(&x, dim).unwrap(),
                &mean_dim(&gx, dim).unwrap(),
            );
            let r = sum_dim(&x, dim).unwrap();
            let gr = r.to_device(GPU).unwrap();
            assert_identical(
                &format!("broadcast_dim {what}"),
                &broadcast_dim(&r, dim, dims[dim], 0.25).unwrap(),
                &broadcast_dim(&gr, dim, dims[dim], 0.25).unwrap(),
            );
        }
        let (s, gs) = pair(vec![1.5f32], &[]);
        assert_identical(
            "broadcast_scalar",
            &broadcast_scalar(&s, &dims, 0.5).unwrap(),
            &broadcast_scalar(&gs, &dims, 0.5).unwrap(),
        );
    }
}

#[test]
fn losses_match_the_cpu() {
    if !gpu_or_skip("losses_match_the_cpu") {
        return;
    }
    for (n, c) in [(1usize, 1usize), (3, 10), (33, 7), (700, 101), (20_000, 3)] {
        let (x, gx) = twin(&values(n * c, 5, 4.0), &[n, c]);
        let labels: Vec<i64> = (0..n as i64).map(|i| (i * 7 + 3) % c as i64).collect();
        let (l, gl) = pair(labels, &[n]);
        let what = format!("cross_entropy n={n} c={c}");
        assert_close(
            &what,
            &cross_entropy(&x, &l).unwrap(),
            &cross_entropy(&gx, &gl).unwrap(),
            1e-5,
        );
        let (g, gg) = pair(vec![0.7f32], &[]);
        assert_close(
            &format!("{what} backward"),
            &cross_entropy_backward(&g, &x, &l).unwrap(),
            &cross_entropy_backward(&gg, &gx, &gl).unwrap(),
            1e-5,
        );
        let (t, gt) = twin(&values(n * c, 6, 1.0), &[n, c]);
        assert_identical(
            &format!("mse n={n} c={c}"),
            &mse(&x, &t).unwrap(),
            &mse(&gx, &gt).unwrap(),
        );
        assert_identical(
            &format!("mse_backward n={n} c={c}"),
            &mse_backward(&g, &x, &t).unwrap(),
            &mse_backward(&gg, &gx, &gt).unwrap(),
        );
    }
    // A label out of range is refused on the GPU as on the CPU.
    let (x, gx) = pair(values(6, 1, 1.0), &[2, 3]);
    let (l, gl) = pair(vec![0i64, 3], &[2]);
    assert!(cross_entropy(&x, &l).is_err());
    let e = cross_entropy(&gx, &gl).unwrap_err().to_string();
    assert!(e.contains("label 3"), "{e}");
}

#[test]
fn optimizer_steps_are_bit_identical() {
    if !gpu_or_skip("optimizer_steps_are_bit_identical") {
        return;
    }
    for &n in &[1usize, 9, 16_385] {
        let p0 = values(n, 1, 1.0);
        let g0 = values(n, 2, 0.1);
        let sgd = [
            SgdConfig {
                lr: 0.1,
                momentum: 0.0,
                dampening: 0.0,
                weight_decay: 0.0,
                nesterov: false,
            },
            SgdConfig {
                lr: 0.05,
                momentum: 0.9,
                dampening: 0.1,
                weight_decay: 1e-4,
                nesterov: false,
            },
            SgdConfig {
                lr: 0.05,
                momentum: 0.9,
                dampening: 0.0,
                weight_decay: 5e-4,
                nesterov: true,
            },
        ];
        for cfg in sgd {
            let (p, gp) = twin(&p0, &[n]);
            let (g, gg) = twin(&g0, &[n]);
            let (b, gb) = twin(&vec![0.0; n], &[n]);
            for step in 0..3 {
                let buf = (cfg.momentum != 0.0).then_some(&b);
                let gbuf = (cfg.momentum != 0.0).then_some(&gb);
                sgd_step(&p, &g, buf, &cfg, step == 0).unwrap();
                sgd_step(&gp, &gg, gbuf, &cfg, step == 0).unwrap();
            }
            assert_identical(&format!("sgd {cfg:?} n={n}"), &p, &gp);
            assert_identical(&format!("sgd buffer {cfg:?} n={n}"), &b, &gb);
        }
        let cfg = AdamConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
        };
        let (p, gp) = twin(&p0, &[n]);
        let (g, gg) = twin(&g0, &[n]);
        let (m, gm) = twin(&vec![0.0; n], &[n]);
        let (v, gv) = twin(&vec![0.0; n], &[n]);
        for step in 1..=3 {
            adam_step(AdamStep {
                param: &p,
                grad: &g,
                m: &m,
                v: &v,
                cfg: &cfg,
                step,
            })
            .unwrap();
            adam_step(AdamStep {
                param: &gp,
                grad: &gg,
                m: &gm,
                v: &gv,
                cfg: &cfg,
                step,
            })
            .unwrap();
        }
        assert_identical(&format!("adam n={n}"), &p, &gp);
        assert_identical(&format!("adam m n={n}"), &m, &gm);
        assert_identical(&format!("adam v n={n}"), &v, &gv);
    }
}

#[test]
fn dropout_uses_the_cpu_philox_stream() {
    if !gpu_or_skip("dropout_uses_the_cpu_philox_stream") {
        return;
    }
    for (t, inner) in [(1usize, 1usize), (4, 7), (3, 16_385), (10, 5_000)] {
        let n = t * inner;
        let (x, gx) = twin(&values(n, 3, 2.0), &[t, inner]);
        for (p, period) in [(0.0f32, n), (0.3, n), (0.5, inner), (0.9, inner)] {
            for rng in [
                RngState { seed: 42, offset: 12 },
                RngState {
                    seed: u64::MAX,
                    offset: u64::MAX - 7,
                },
            ] {
                let what = format!("dropout t={t} inner={inner} p={p} period={period} {rng:?}");
                assert_identical(
                    &what,
                    &dropout(&x, p, rng, period).unwrap(),
                    &dropout(&gx, p, rng, period).unwrap(),
                );
                assert_identical(
                    &format!("{what} backward"),
                    &dropout_backward(&x, p, rng, period).unwrap(),
                    &dropout_backward(&gx, p, rng, period).unwrap(),
                );
            }
        }
    }
    // Uniform initialisation draws the same stream on both devices.
    let kind = memopt_core::MemoryKind::Parameter;
    let a = Tensor::rand_uniform([1000], -1.0, 1.0, &mut Philox::new(9), Device::Cpu, kind).unwrap();
    let b = Tensor::rand_uniform([1000], -1.0, 1.0, &mut Philox::new(9), GPU, kind).unwrap();
    assert_identical("rand_uniform", &a, &b);
}
