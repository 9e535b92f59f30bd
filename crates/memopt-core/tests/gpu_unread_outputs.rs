//! The CUDA halves of the forwards for backward only (BatchNorm statistics without the output,
//! neurons without spikes) and of the sum written in place give the CPU's bits. Each test
//! skips with the reason when there is no GPU, and fails under MEMOPT_REQUIRE_GPU=1.

mod gpu_common;

use gpu_common::*;
use memopt_core::Tensor;
use memopt_core::kernels::*;

#[test]
fn batch_norm_statistics_without_the_output_are_bit_identical() {
    if !gpu_or_skip("batch_norm_statistics_without_the_output_are_bit_identical") {
        return;
    }
    for dims in [vec![5usize, 4, 7], vec![8, 16, 32, 32]] {
        let (n, c) = (dims.iter().product::<usize>(), dims[1]);
        let (x, gx) = twin(&values(n, 1, 3.0), &dims);
        let (w, gw) = twin(&values(c, 2, 1.0), &[c]);
        let (rm, grm) = twin(&values(c, 4, 0.1), &[c]);
        let (rv, grv) = pair(vec![1.0f32; c], &[c]);
        let run = |x: &Tensor, w: &Tensor, rm: &Tensor, rv: &Tensor| {
            batch_norm_train_for_backward(BatchNormTrain {
                x,
                weight: Some(w),
                bias: None,
                running: Some(RunningStats { mean: rm, var: rv }),
                momentum: 0.1,
                eps: 1e-5,
            })
            .unwrap()
        };
        let (o, go) = (run(&x, &w, &rm, &rv), run(&gx, &gw, &grm, &grv));
        assert!(!go.y.is_materialised());
        let what = format!("batch_norm for backward {dims:?}");
        assert_identical(&format!("{what} save_mean"), &o.save_mean, &go.save_mean);
        assert_identical(&format!("{what} save_invstd"), &o.save_invstd, &go.save_invstd);
        assert_identical(&format!("{what} running mean"), &rm, &grm);
        assert_identical(&format!("{what} running var"), &rv, &grv);
    }
}

#[test]
fn neurons_without_spikes_keep_the_cpu_potentials_and_states() {
    if !gpu_or_skip("neurons_without_spikes_keep_the_cpu_potentials_and_states") {
        return;
    }
    for cfg in [NeuronConfig::if_neuron(), NeuronConfig::lif(2.0)] {
        for (t, inner) in [(1usize, 1usize), (10, 8193)] {
            let what = format!("{cfg:?} T={t} n={inner} without spikes");
            let (x, gx) = twin(&values(t * inner, 1, 2.0), &[t, inner]);
            let (v0, gv0) = twin(&values(inner, 2, 0.5), &[1, inner]);
            let (v0, gv0) = (v0.reshape([inner]).unwrap(), gv0.reshape([inner]).unwrap());
            let o = neuron_forward(&cfg, &x, Some(&v0), None, true).unwrap();
            let go = neuron_forward_for_backward(&cfg, &gx, Some(&gv0), None).unwrap();
            assert!(!go.spikes.is_materialised());
            assert_identical(&format!("{what} v_final"), &o.v_final, &go.v_final);
            assert_identical(&format!("{what} h_seq"), &o.h_seq.unwrap(), &go.h_seq.unwrap());
        }
    }
}

#[test]
fn sums_written_in_place_are_bit_identical() {
    if !gpu_or_skip("sums_written_in_place_are_bit_identical") {
        return;
    }
    for n in ODD_SIZES {
        let (a, ga) = pair(values(n, 5, 3.0), &[n]);
        let (b, gb) = pair(values(n, 6, 3.0), &[n]);
        let expected = add(&a, &b).unwrap();
        let over_a = add(ga.to_device(GPU).unwrap(), &gb).unwrap();
        let over_b = add(&ga, gb.to_device(GPU).unwrap()).unwrap();
        assert_identical(&format!("add over a n={n}"), &expected, &over_a);
        assert_identical(&format!("add over b n={n}"), &expected, &over_b);
    }
}
