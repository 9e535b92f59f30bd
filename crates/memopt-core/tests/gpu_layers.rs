//! BatchNorm, pooling, convolution, linear layers, batched products, splits and row scales and the
//! multi-step neurons
//! on the GPU against the CPU kernels, through the public op API, on random inputs, odd sizes and views. Spikes,
//! BatchNorm, pooling and neuron results must be bit-identical (their arithmetic is add, mul,
//! div and sqrt in the CPU's order; the PLIF parameter's gradient is summed in the same blocks of
//! `PLIF_PARTIAL_NEURONS` on both); GEMM-based results (cuBLAS sums in another order) within
//! 1e-5 of the output's magnitude. Each test skips with the reason when there is no GPU, and
//! fails under MEMOPT_REQUIRE_GPU=1.

mod gpu_common;

use gpu_common::*;
use memopt_core::Tensor;
use memopt_core::kernels::*;

#[test]
fn batch_norm_train_eval_and_backward_are_bit_identical() {
    if !gpu_or_skip("batch_norm_train_eval_and_backward_are_bit_identical") {
        return;
    }
    for dims in [
        vec![2usize, 3],
        vec![5, 4, 7],
        vec![3, 2, 9, 11],
        vec![8, 16, 32, 32],
    ] {
        let n: usize = dims.iter().product();
        let c = dims[1];
        let (x, gx) = twin(&values(n, 1, 3.0), &dims);
        let (w, gw) = twin(&values(c, 2, 1.0), &[c]);
        let (b, gb) = twin(&values(c, 3, 1.0), &[c]);
        let (rm, grm) = twin(&values(c, 4, 0.1), &[c]);
        let (rv, grv) = pair(vec![1.0f32; c], &[c]);
        let what = format!("batch_norm {dims:?}");
        let run = |x: &Tensor, w: &Tensor, b: &Tensor, rm: &Tensor, rv: &Tensor| {
            batch_norm_train(BatchNormTrain {
                x,
                weight: Some(w),
                bias: Some(b),
                running: Some(RunningStats { mean: rm, var: rv }),
                momentum: 0.1,
                eps: 1e-5,
            })
            .unwrap()
        };
        let (o, go) = (run(&x, &w, &b, &rm, &rv), run(&gx, &gw, &gb, &grm, &grv));
        assert_identical(&format!("{what} y"), &o.y, &go.y);
        assert_identical(&format!("{what} save_mean"), &o.save_mean, &go.save_mean);
        assert_identical(&format!("{what} save_invstd"), &o.save_invstd, &go.save_invstd);
        assert_identical(&format!("{what} running mean"), &rm, &grm);
        assert_identical(&format!("{what} running var"), &rv, &grv);
        let e = batch_norm_eval(&x, Some(&w), None, RunningStats { mean: &rm, var: &rv }, 1e-5).unwrap();
        let ge = batch_norm_eval(
            &gx,
            Some(&gw),
            None,
            RunningStats {
                mean: &grm,
                var: &grv,
            },
            1e-5,
        )
        .unwrap();
        assert_identical(&format!("{what} eval"), &e, &ge);
        let (g, gg) = twin(&values(n, 5, 1.0), &dims);
        let r = batch_norm_backward(BatchNormBackward {
            grad_y: (&g).into(),
            x: &x,
            weight: Some(&w),
            save_mean: &o.save_mean,
            save_invstd: &o.save_invstd,
            needs: GradNeeds::ALL,
        })
        .unwrap();
        let gr = batch_norm_backward(BatchNormBackward {
            grad_y: (&gg).into(),
            x: &gx,
            weight: Some(&gw),
            save_mean: &go.save_mean,
            save_invstd: &go.save_invstd,
            needs: GradNeeds::ALL,
        })
        .unwrap();
        for (name, a, b) in [
            ("x", &r.x, &gr.x),
            ("weight", &r.weight, &gr.weight),
            ("bias", &r.bias, &gr.bias),
        ] {
            assert_identical(
                &format!("{what} grad {name}"),
                a.as_ref().unwrap(),
                b.as_ref().unwrap(),
            );
        }
        // Written over an exclusive output gradient: the same bits.
        let owned = gg.deep_copy(memopt_core::MemoryKind::Gradient).unwrap();
        let gi = batch_norm_backward(BatchNormBackward {
            grad_y: owned.into(),
            x: &gx,
            weight: Some(&gw),
            save_mean: &go.save_mean,
            save_invstd: &go.save_invstd,
            needs: GradNeeds::ALL,
        })
        .unwrap();
        assert_identical(
            &format!("{what} grad x in place"),
            r.x.as_ref().unwrap(),
            gi.x.as_ref().unwrap(),
        );
    }
}

/// The chunked entry points on the GPU, over parts of a batch, against the whole-batch CPU
/// kernels: the same bits (statistics, running statistics, outputs, gradients).
#[test]
fn chunked_batch_norm_on_the_gpu_matches_the_whole_batch_on_the_cpu() {
    if !gpu_or_skip("chunked_batch_norm_on_the_gpu_matches_the_whole_batch_on_the_cpu") {
        return;
    }
    let dims = [6usize, 5, 7, 9];
    let parts = [0..1, 1..4, 4..6];
    let n: usize = dims.iter().product();
    let c = dims[1];
    let (x, gx) = twin(&values(n, 11, 3.0), &dims);
    let (w, gw) = twin(&values(c, 12, 1.0), &[c]);
    let (b, gb) = twin(&values(c, 13, 1.0), &[c]);
    let (rm, grm) = twin(&values(c, 14, 0.1), &[c]);
    let (rv, grv) = pair(vec![1.0f32; c], &[c]);
    let (g, gg) = twin(&values(n, 15, 1.0), &dims);
    let o = batch_norm_train(BatchNormTrain {
        x: &x,
        weight: Some(&w),
        bias: Some(&b),
        running: Some(RunningStats { mean: &rm, var: &rv }),
        momentum: 0.1,
        eps: 1e-5,
    })
    .unwrap();
    let r = batch_norm_backward(BatchNormBackward {
        grad_y: (&g).into(),
        x: &x,
        weight: Some(&w),
        save_mean: &o.save_mean,
        save_invstd: &o.save_invstd,
        needs: GradNeeds::ALL,
    })
    .unwrap();
    let part = |t: &Tensor, p: &std::ops::Range<usize>| t.narrow0(p.start, p.len()).unwrap();
    let mut sums = None;
    for p in &parts {
        sums = Some(batch_norm_stat_sums(&part(&gx, p), sums).unwrap());
    }
    let stats = batch_norm_stats_finish(
        sums.as_ref().unwrap(),
        Some(RunningStats {
            mean: &grm,
            var: &grv,
        }),
        0.1,
        1e-5,
    )
    .unwrap();
    assert_identical("chunked mean", &o.save_mean, &stats.mean);
    assert_identical("chunked invstd", &o.save_invstd, &stats.invstd);
    assert_identical("chunked running mean", &rm, &grm);
    assert_identical("chunked running var", &rv, &grv);
    let mut gsums = None;
    for p in parts.iter().rev() {
        let y = batch_norm_normalize(&part(&gx, p), Some(&gw), Some(&gb), &stats).unwrap();
        assert_identical(&format!("chunked y {p:?}"), &part(&o.y, p), &y);
        gsums = Some(batch_norm_grad_sums(&part(&gg, p), &part(&gx, p), &stats.mean, gsums).unwrap());
    }
    let gsums = gsums.unwrap();
    let pg = batch_norm_param_grads(&gsums, &stats.invstd, true, true).unwrap();
    assert_identical(
        "chunked grad weight",
        r.weight.as_ref().unwrap(),
        pg.weight.as_ref().unwrap(),
    );
    assert_identical(
        "chunked grad bias",
        r.bias.as_ref().unwrap(),
        pg.bias.as_ref().unwrap(),
    );
    for p in &parts {
        let owned = part(&gg, p).deep_copy(memopt_core::MemoryKind::Gradient).unwrap();
        let gi = batch_norm_backward_input(BatchNormBackwardInput {
            grad_y: owned.into(),
            x: &part(&gx, p),
            weight: Some(&gw),
            stats: &stats,
            sums: &gsums,
        })
        .unwrap();
        assert_identical(
            &format!("chunked grad x {p:?}"),
            &part(r.x.as_ref().unwrap(), p),
            &gi,
        );
    }
}

#[test]
fn pooling_forward_and_backward_are_bit_identical() {
    if !gpu_or_skip("pooling_forward_and_backward_are_bit_identical") {
        return;
    }
    let params = [
        Pool2dParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
        },
        Pool2dParams {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
        },
        Pool2dParams {
            kernel: [3, 2],
            stride: [2, 1],
            padding: [1, 0],
        },
    ];
    for dims in [[1usize, 1, 1, 1], [2, 3, 7, 5], [4, 2, 16, 17]] {
        let n = dims.iter().product();
        let (x, gx) = twin(&values(n, 7, 2.0), &dims);
        let (s, gs) = twin(&spikes(n, 8, 1), &dims);
        let (s, gs) = (s.with_spike_flag(true), gs.with_spike_flag(true));
        for p in &params {
            if p.output_hw([dims[2], dims[3]]).is_err() {
                continue;
            }
            let what = format!("{dims:?} {p:?}");
            let ((y, i), (gy, gi)) = (max_pool2d(&x, p).unwrap(), max_pool2d(&gx, p).unwrap());
            assert_identical(&format!("max_pool2d {what}"), &y, &gy);
            assert_eq!(
                i.to_vec::<u32>().unwrap(),
                gi.to_vec::<u32>().unwrap(),
                "max_pool2d indices {what}"
            );
            let (sy, _) = max_pool2d(&s, p).unwrap();
            let (gsy, _) = max_pool2d(&gs, p).unwrap();
            assert_identical(&format!("max_pool2d spikes {what}"), &sy, &gsy);
            let (g, gg) = pair(values(y.elem_count(), 9, 1.0), y.dims());
            assert_identical(
                &format!("max_pool2d_backward {what}"),
                &max_pool2d_backward(&g, &i, &dims).unwrap(),
                &max_pool2d_backward(&gg, &gi, &dims).unwrap(),
            );
            for pad in [false, true] {
                let what = format!("{what} count_include_pad={pad}");
                assert_identical(
                    &format!("avg_pool2d {what}"),
                    &avg_pool2d(&x, p, pad).unwrap(),
                    &avg_pool2d(&gx, p, pad).unwrap(),
                );
                assert_identical(
                    &format!("avg_pool2d_backward {what}"),
                    &avg_pool2d_backward(&g, &dims, p, pad).unwrap(),
                    &avg_pool2d_backward(&gg, &dims, p, pad).unwrap(),
                );
            }
        }
        for out in [[1usize, 1], [2, 3], [dims[2], dims[3]], [dims[2] + 2, 3]] {
            let what = format!("adaptive_avg_pool2d {dims:?} -> {out:?}");
            let y = adaptive_avg_pool2d(&x, out).unwrap();
            assert_identical(&what, &y, &adaptive_avg_pool2d(&gx, out).unwrap());
            let (g, gg) = pair(values(y.elem_count(), 10, 1.0), y.dims());
            assert_identical(
                &format!("{what} backward"),
                &adaptive_avg_pool2d_backward(&g, &dims).unwrap(),
                &adaptive_avg_pool2d_backward(&gg, &dims).unwrap(),
            );
        }
    }
}

fn conv(stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], groups: usize) -> Conv2dParams {
    Conv2dParams {
        stride,
        padding,
        dilation,
        groups,
    }
}

/// Input and weight gradients (GEMMs) within 1e-5; the bias gradient, a plain f64 sum in the
/// CPU's order, bit for bit.
fn assert_weight_grads(what: &str, cpu: [&Option<Tensor>; 3], gpu: [&Option<Tensor>; 3]) {
    let [(cx, gx), (cw, gw), (cb, gb)] =
        [0, 1, 2].map(|i| (cpu[i].as_ref().unwrap(), gpu[i].as_ref().unwrap()));
    assert_close(&format!("{what} grad x"), cx, gx, 1e-5);
    assert_close(&format!("{what} grad w"), cw, gw, 1e-5);
    assert_identical(&format!("{what} grad b"), cb, gb);
}

#[test]
fn convolution_and_linear_match_within_gemm_tolerance() {
    if !gpu_or_skip("convolution_and_linear_match_within_gemm_tolerance") {
        return;
    }
    let cases = [
        // (x dims, w dims, params, time steps)
        (
            [2usize, 3, 9, 7],
            [4usize, 3, 3, 3],
            conv([1, 1], [1, 1], [1, 1], 1),
            2,
        ),
        ([3, 4, 11, 11], [6, 2, 3, 3], conv([2, 2], [1, 0], [1, 1], 2), 3),
        ([4, 2, 8, 8], [5, 2, 1, 1], conv([1, 1], [0, 0], [1, 1], 1), 4),
        ([2, 2, 10, 9], [3, 2, 3, 2], conv([1, 2], [2, 1], [2, 1], 1), 1),
        // A training step's first VGG layer: 8 images of 1024 pixels, two CUDA im2col chunks.
        ([8, 2, 32, 32], [16, 2, 3, 3], conv([1, 1], [1, 1], [1, 1], 1), 4),
    ];
    for (xd, wd, p, steps) in cases {
        let what = format!("conv2d x {xd:?} w {wd:?} {p:?}");
        let (x, gx) = twin(&values(xd.iter().product(), 1, 1.0), &xd);
        let (w, gw) = pair(values(wd.iter().product(), 2, 0.5), &wd);
        let (b, gb) = pair(values(wd[0], 3, 0.5), &[wd[0]]);
        let y = conv2d(&x, &w, Some(&b), &p, steps).unwrap();
        assert_close(&what, &y, &conv2d(&gx, &gw, Some(&gb), &p, steps).unwrap(), 1e-5);
        let (g, gg) = pair(values(y.elem_count(), 4, 1.0), y.dims());
        let r = conv2d_backward(Conv2dBackward {
            grad: &g,
            x: &x,
            w: &w,
            has_bias: true,
            params: &p,
            needs: GradNeeds::ALL,
            acc: None,
        })
        .unwrap();
        let gr = conv2d_backward(Conv2dBackward {
            grad: &gg,
            x: &gx,
            w: &gw,
            has_bias: true,
            params: &p,
            needs: GradNeeds::ALL,
            acc: None,
        })
        .unwrap();
        assert_weight_grads(&what, [&r.x, &r.w, &r.b], [&gr.x, &gr.w, &gr.b]);
    }
    for (m, k, n, steps) in [(1usize, 1usize, 1usize, 1usize), (6, 33, 10, 3), (40, 128, 11, 4)] {
        let what = format!("linear m={m} k={k} n={n}");
        let (x, gx) = twin(&values(m * k, 5, 1.0), &[m, k]);
        let (w, gw) = pair(values(n * k, 6, 0.5), &[n, k]);
        let (b, gb) = pair(values(n, 7, 0.5), &[n]);
        let y = linear(&x, &w, Some(&b), steps).unwrap();
        assert_close(&what, &y, &linear(&gx, &gw, Some(&gb), steps).unwrap(), 1e-5);
        let (g, gg) = pair(values(m * n, 8, 1.0), &[m, n]);
        let r = linear_backward(LinearBackward {
            grad: &g,
            x: &x,
            w: &w,
            has_bias: true,
            needs: GradNeeds::ALL,
            acc: None,
        })
        .unwrap();
        let gr = linear_backward(LinearBackward {
            grad: &gg,
            x: &gx,
            w: &gw,
            has_bias: true,
            needs: GradNeeds::ALL,
            acc: None,
        })
        .unwrap();
        assert_weight_grads(&what, [&r.x, &r.w, &r.b], [&gr.x, &gr.w, &gr.b]);
    }
}

#[test]
fn batched_products_match_within_gemm_tolerance_and_exactly_on_spikes() {
    if !gpu_or_skip("batched_products_match_within_gemm_tolerance_and_exactly_on_spikes") {
        return;
    }
    // Attention's shapes: [T, N, heads, rows, cols] items, every transposition.
    let (lead, (m, k, n)) = ([3usize, 2, 4], (16usize, 24usize, 16usize));
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let t = Transposed { a: ta, b: tb };
        let with = |rows, cols| lead.iter().copied().chain([rows, cols]).collect::<Vec<_>>();
        let ad = if ta { with(k, m) } else { with(m, k) };
        let bd = if tb { with(n, k) } else { with(k, n) };
        let count = |d: &[usize]| d.iter().product::<usize>();
        let what = format!("batched_matmul {t:?}");
        // Spikes: integer counts, the same bits in any summation order.
        let (sa, gsa) = twin(&spikes(count(&ad), 1, 1), &ad);
        let (sb, gsb) = pair(spikes(count(&bd), 2, 1), &bd);
        assert_identical(
            &format!("{what} on spikes"),
            &batched_matmul(&sa, &sb, t).unwrap(),
            &batched_matmul(&gsa, &gsb, t).unwrap(),
        );
        let (a, ga) = twin(&values(count(&ad), 3, 1.0), &ad);
        let (b, gb) = pair(values(count(&bd), 4, 1.0), &bd);
        let y = batched_matmul(&a, &b, t).unwrap();
        assert_close(&what, &y, &batched_matmul(&ga, &gb, t).unwrap(), 1e-5);
        let (g, gg) = pair(values(y.elem_count(), 5, 1.0), y.dims());
        let (ca, cb) = batched_matmul_backward(&g, &a, &b, t, (true, true)).unwrap();
        let (da, db) = batched_matmul_backward(&gg, &ga, &gb, t, (true, true)).unwrap();
        assert_close(&format!("{what} grad a"), &ca.unwrap(), &da.unwrap(), 1e-5);
        assert_close(&format!("{what} grad b"), &cb.unwrap(), &db.unwrap(), 1e-5);
    }
}

#[test]
fn splits_concatenations_and_row_scales_are_bit_identical() {
    if !gpu_or_skip("splits_concatenations_and_row_scales_are_bit_identical") {
        return;
    }
    // Attention's Q, K, V from [T*N, 3C, L], views included (twin: an offset view).
    let dims = [6usize, 3 * 10, 7];
    let (x, gx) = twin(&values(dims.iter().product(), 11, 1.0), &dims);
    for (dim, &size) in dims.iter().enumerate() {
        let sizes: Vec<usize> = match size {
            30 => vec![10, 10, 10],
            d => vec![1, d - 1],
        };
        let (cpu, gpu) = (
            split_dim(&x, dim, &sizes).unwrap(),
            split_dim(&gx, dim, &sizes).unwrap(),
        );
        for (i, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
            assert_identical(&format!("split_dim {dim} part {i}"), c, g);
        }
        assert_identical(
            &format!("cat_dim {dim}"),
            &cat_dim(&cpu, dim, memopt_core::MemoryKind::Gradient).unwrap(),
            &cat_dim(&gpu, dim, memopt_core::MemoryKind::Gradient).unwrap(),
        );
    }
    let (s, gs) = pair(values(6 * 30, 12, 1.0), &dims[..2]);
    let kind = memopt_core::MemoryKind::Activation;
    assert_identical(
        "scale_rows",
        &scale_rows(&x, &s, kind).unwrap(),
        &scale_rows(&gx, &gs, kind).unwrap(),
    );
}

#[test]
fn neurons_forward_and_backward_are_bit_identical() {
    if !gpu_or_skip("neurons_forward_and_backward_are_bit_identical") {
        return;
    }
    let mut configs = vec![
        NeuronConfig::if_neuron(),
        NeuronConfig::lif(2.0),
        NeuronConfig::plif(),
    ];
    let mut lif = NeuronConfig::lif(3.0);
    lif.kind = NeuronKind::Lif {
        tau: 3.0,
        decay_input: false,
    };
    lif.v_reset = None;
    lif.surrogate = Surrogate::ATan { alpha: 2.0 };
    configs.push(lif);
    let mut plif = NeuronConfig::plif();
    plif.kind = NeuronKind::Plif { decay_input: false };
    plif.detach_reset = true;
    plif.v_reset = None;
    configs.push(plif);
    for cfg in &configs {
        let is_plif = matches!(cfg.kind, NeuronKind::Plif { .. });
        // 8193 neurons: nine PLIF partial blocks (two CPU chunks), the last of one neuron.
        for (t, inner) in [(1usize, 1usize), (4, 33), (10, 8193)] {
            let what = format!("{cfg:?} T={t} n={inner}");
            let (x, gx) = twin(&values(t * inner, 1, 2.0), &[t, inner]);
            let (v0, gv0) = twin(&values(inner, 2, 0.5), &[1, inner]);
            let (v0, gv0) = (v0.reshape([inner]).unwrap(), gv0.reshape([inner]).unwrap());
            let (w, gw) = pair(vec![0.3f32], &[1]);
            let (w, gw) = (is_plif.then_some(&w), is_plif.then_some(&gw));
            let o = neuron_forward(cfg, &x, Some(&v0), w, true).unwrap();
            let go = neuron_forward(cfg, &gx, Some(&gv0), gw, true).unwrap();
            assert_identical(&format!("{what} spikes"), &o.spikes, &go.spikes);
            assert_identical(&format!("{what} v_final"), &o.v_final, &go.v_final);
            let (h, gh) = (o.h_seq.unwrap(), go.h_seq.unwrap());
            assert_identical(&format!("{what} h_seq"), &h, &gh);
            let (g, gg) = twin(&values(t * inner, 3, 1.0), &[t, inner]);
            let (gvf, ggvf) = pair(values(inner, 4, 1.0), &[inner]);
            // Backward from lent gradients (g, grad_v_final, h_seq, v_init, w), with v_init's
            // gradient.
            let backward = |g, gvf, h, v0, w| {
                neuron_backward(NeuronBackward {
                    cfg,
                    grad_spikes: Operand::Lent(g),
                    grad_v_final: Some(gvf),
                    h_seq: h,
                    v_init: Some(v0),
                    w,
                    want_v_init_grad: true,
                    w_acc: None,
                })
                .unwrap()
            };
            let r = backward(&g, &gvf, &h, &v0, w);
            let gr = backward(&gg, &ggvf, &gh, &gv0, gw);
            assert_identical(&format!("{what} grad x"), &r.x, &gr.x);
            assert_identical(
                &format!("{what} grad v_init"),
                r.v_init.as_ref().unwrap(),
                gr.v_init.as_ref().unwrap(),
            );
            if is_plif {
                assert_identical(
                    &format!("{what} grad w"),
                    r.w.as_ref().unwrap(),
                    gr.w.as_ref().unwrap(),
                );
            }
            // In place (input reused for h_seq, output gradient for the input gradient).
            let owned = gx.deep_copy(memopt_core::MemoryKind::Activation).unwrap();
            let gi = neuron_forward(cfg, owned, Some(&gv0), gw, true).unwrap();
            assert_identical(&format!("{what} h_seq in place"), &h, gi.h_seq.as_ref().unwrap());
            let owned = gg.deep_copy(memopt_core::MemoryKind::Gradient).unwrap();
            let acc = memopt_core::Tensor::zeros(
                [1],
                memopt_core::DType::F32,
                GPU,
                memopt_core::MemoryKind::Gradient,
            )
            .unwrap();
            let gi = neuron_backward(NeuronBackward {
                cfg,
                grad_spikes: owned.into(),
                grad_v_final: Some(&ggvf),
                h_seq: &gh,
                v_init: Some(&gv0),
                w: gw,
                want_v_init_grad: false,
                w_acc: is_plif.then_some(&acc),
            })
            .unwrap();
            assert_identical(&format!("{what} grad x in place"), &r.x, &gi.x);
            if is_plif {
                assert_identical(&format!("{what} w accumulated"), gr.w.as_ref().unwrap(), &acc);
            }
        }
    }
}
