//! Tests of the neuron kernels: a proptest against the f64 reference (forward and every
//! gradient), large dyadic inputs across chunk boundaries and the parallel path, finite
//! differences of the exact part of the gradient, temporal chunking, Meta event streams and
//! errors.

// Indexed loops over perturbed positions read more plainly than iterator chains here.
#![allow(clippy::needless_range_loop)]

mod meta_errors;
mod reference;

use super::*;
use crate::kernels::testkit::neuron_backward_with;
use crate::{Device, MemoryKind};
use proptest::prelude::*;
use reference::{RefInput, RefOutput, reference};

/// A small deterministic generator for test data.
pub(super) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next_f32()
    }
    pub fn vec(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform(lo, hi)).collect()
    }
}

pub(super) fn tensor(v: Vec<f32>, shape: &[usize], device: Device) -> Tensor {
    Tensor::from_vec(v, shape, device, MemoryKind::Input).unwrap()
}

/// One complete test case: config, shape `[T, inner...]` and data.
#[derive(Debug, Clone)]
pub(super) struct Case {
    pub cfg: NeuronConfig,
    pub shape: Vec<usize>,
    pub x: Vec<f32>,
    pub v_init: Option<Vec<f32>>,
    pub w: f32,
    pub grad_spikes: Vec<f32>,
    pub grad_v_final: Option<Vec<f32>>,
}

impl Case {
    pub fn steps(&self) -> usize {
        self.shape[0]
    }
    pub fn n(&self) -> usize {
        self.shape[1..].iter().product()
    }
    pub fn is_plif(&self) -> bool {
        matches!(self.cfg.kind, NeuronKind::Plif { .. })
    }

    /// Runs forward (saving `h_seq`) and backward on `device`.
    pub fn run(&self, device: Device, want_v_init_grad: bool) -> Result<(NeuronOutput, NeuronGrads)> {
        let state = &self.shape[1..];
        let x = tensor(self.x.clone(), &self.shape, device);
        let v_init = self.v_init.clone().map(|v| tensor(v, state, device));
        let w = self.is_plif().then(|| tensor(vec![self.w], &[1], device));
        let out = neuron_forward(&self.cfg, &x, v_init.as_ref(), w.as_ref(), true)?;
        let gs = tensor(self.grad_spikes.clone(), &self.shape, device);
        let gv = self.grad_v_final.clone().map(|g| tensor(g, state, device));
        let h_seq = out.h_seq.clone().expect("h_seq was asked for");
        let grads = neuron_backward_with(
            &self.cfg,
            &gs,
            gv.as_ref(),
            &h_seq,
            v_init.as_ref(),
            w.as_ref(),
            want_v_init_grad,
            None,
        )?;
        Ok((out, grads))
    }

    pub fn reference(&self) -> RefOutput {
        reference(&RefInput {
            cfg: self.cfg,
            steps: self.steps(),
            n: self.n(),
            x: &self.x,
            v_init: self.v_init.as_deref(),
            w: self.w,
            grad_spikes: &self.grad_spikes,
            grad_v_final: self.grad_v_final.as_deref(),
        })
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rtol * (w.abs() + 1e-2 * scale).max(1e-3);
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (tol {tol})"
        );
    }
}

/// Compares a kernel run with the reference: spikes exactly, the rest to `rtol`.
fn check_against_reference(case: &Case, rtol: f64) {
    let r = case.reference();
    let (out, grads) = case.run(Device::Cpu, true).unwrap();
    let spikes = out.spikes.to_vec_f32().unwrap();
    let want: Vec<f32> = r.spikes.iter().map(|&s| s as f32).collect();
    assert_eq!(spikes, want, "spikes");
    assert!(out.spikes.is_spike());
    assert_eq!(out.spikes.dims(), case.shape.as_slice());
    assert_eq!(out.v_final.dims(), &case.shape[1..]);
    assert_close("h_seq", &out.h_seq.unwrap().to_vec_f32().unwrap(), &r.h_seq, rtol);
    assert_close("v_final", &out.v_final.to_vec_f32().unwrap(), &r.v_final, rtol);
    assert_close("grad_x", &grads.x.to_vec_f32().unwrap(), &r.grad_x, rtol);
    let gvi = grads.v_init.expect("grad_v_init was asked for");
    assert_eq!(gvi.dims(), &case.shape[1..]);
    assert_close("grad_v_init", &gvi.to_vec_f32().unwrap(), &r.grad_v_init, rtol);
    match grads.w {
        Some(gw) => {
            assert!(case.is_plif());
            assert_eq!(gw.dims(), &[1]);
            let g = gw.to_scalar_f32().unwrap() as f64;
            let tol = rtol * (r.grad_w_scale + 1e-3);
            assert!(
                (g - r.grad_w).abs() <= tol,
                "grad_w: got {g}, want {} (tol {tol})",
                r.grad_w
            );
        }
        None => assert!(!case.is_plif(), "PLIF must return grad_w"),
    }
}

fn surrogate_strategy() -> impl Strategy<Value = Surrogate> {
    prop_oneof![
        (0.5f32..6.0).prop_map(|alpha| Surrogate::Sigmoid { alpha }),
        (0.5f32..6.0).prop_map(|alpha| Surrogate::ATan { alpha }),
    ]
}

fn config_strategy() -> impl Strategy<Value = NeuronConfig> {
    let kind = prop_oneof![
        Just(NeuronKind::If),
        (1.05f32..5.0, any::<bool>()).prop_map(|(tau, decay_input)| NeuronKind::Lif { tau, decay_input }),
        any::<bool>().prop_map(|decay_input| NeuronKind::Plif { decay_input }),
    ];
    let v_reset = prop_oneof![Just(None), Just(Some(0.0f32)), (-0.6f32..0.4).prop_map(Some)];
    (kind, 0.3f32..2.0, v_reset, any::<bool>(), surrogate_strategy()).prop_map(
        |(kind, v_threshold, v_reset, detach_reset, surrogate)| NeuronConfig {
            kind,
            v_threshold,
            v_reset,
            detach_reset,
            surrogate,
        },
    )
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        config_strategy(),
        1usize..=6,
        prop::collection::vec(1usize..=7, 0..=2),
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(cfg, steps, inner, seed, with_v, with_gv)| {
            let mut rng = Rng::new(seed);
            let mut shape = vec![steps];
            shape.extend(inner);
            let n: usize = shape[1..].iter().product();
            Case {
                cfg,
                x: rng.vec(steps * n, -1.5, 2.5),
                v_init: with_v.then(|| rng.vec(n, -1.0, 1.5)),
                w: rng.uniform(-2.0, 2.0),
                grad_spikes: rng.vec(steps * n, -2.0, 2.0),
                grad_v_final: with_gv.then(|| rng.vec(n, -1.0, 1.0)),
                shape,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Forward (spikes exactly, h_seq, v_final) and backward (grad_x, grad_v_init, grad_w) agree
    /// with the f64 reference on random configs, shapes, initial states and upstream gradients.
    #[test]
    fn matches_reference(case in case_strategy()) {
        // f32 and f64 may fire differently within rounding of the threshold.
        prop_assume!(case.reference().min_margin > 1e-4);
        check_against_reference(&case, 2e-4);
    }
}

/// Dyadic inputs (multiples of 1/8, tau 2, w 0) make the f32 forward exact, so a large case
/// with exact threshold ties can be compared too; 2 chunks + 37 neurons span three chunks (one
/// partial) and 9 steps put the work above the parallel threshold.
#[test]
fn large_dyadic_cases_cross_chunks_and_run_in_parallel() {
    let mut rng = Rng::new(7);
    let (steps, n) = (9, 2 * chunks::CHUNK + 37);
    let dyadic = |rng: &mut Rng, len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| (rng.uniform(-16.0, 24.0).floor()) / 8.0)
            .collect()
    };
    let configs = [
        NeuronConfig::lif(2.0),
        NeuronConfig {
            v_reset: None,
            surrogate: Surrogate::ATan { alpha: 2.0 },
            ..NeuronConfig::plif()
        },
        NeuronConfig {
            detach_reset: true,
            ..NeuronConfig::if_neuron()
        },
        NeuronConfig {
            kind: NeuronKind::Plif { decay_input: false },
            v_reset: Some(-0.25),
            ..NeuronConfig::plif()
        },
    ];
    for cfg in configs {
        let case = Case {
            cfg,
            shape: vec![steps, 13, n / 13 + 1],
            x: Vec::new(),
            v_init: None,
            w: 0.0,
            grad_spikes: Vec::new(),
            grad_v_final: None,
        };
        let n = case.n();
        let case = Case {
            x: dyadic(&mut rng, steps * n),
            v_init: Some(dyadic(&mut rng, n)),
            grad_spikes: rng.vec(steps * n, -1.0, 1.0),
            grad_v_final: Some(rng.vec(n, -1.0, 1.0)),
            ..case
        };
        assert!(case.reference().spikes.contains(&1.0));
        check_against_reference(&case, 1e-4);
    }
}

/// With detach_reset and no gradient on the spikes, the surrogate drops out and backward is
/// the exact gradient of `sum(grad_v_final * v_final)` (piecewise affine in x and v_init,
/// smooth in w): central differences agree wherever the spikes do not change.
#[test]
fn finite_differences_of_the_membrane_path() {
    let mut rng = Rng::new(11);
    let configs = [
        NeuronConfig {
            detach_reset: true,
            ..NeuronConfig::lif(1.7)
        },
        NeuronConfig {
            detach_reset: true,
            v_reset: None,
            kind: NeuronKind::Lif {
                tau: 3.0,
                decay_input: false,
            },
            ..NeuronConfig::lif(3.0)
        },
        NeuronConfig {
            detach_reset: true,
            ..NeuronConfig::plif()
        },
        NeuronConfig {
            detach_reset: true,
            v_reset: None,
            kind: NeuronKind::Plif { decay_input: false },
            ..NeuronConfig::plif()
        },
    ];
    for cfg in configs {
        let (steps, n) = (5, 6);
        let case = Case {
            cfg,
            shape: vec![steps, n],
            x: rng.vec(steps * n, -1.0, 2.0),
            v_init: Some(rng.vec(n, -0.5, 1.0)),
            w: rng.uniform(-1.0, 1.0),
            grad_spikes: vec![0.0; steps * n],
            grad_v_final: Some(rng.vec(n, -1.0, 1.0)),
        };
        let gvf = case.grad_v_final.clone().unwrap();
        let (out0, grads) = case.run(Device::Cpu, true).unwrap();
        let spikes0 = out0.spikes.to_vec_f32().unwrap();
        // Loss and spikes of a perturbed case.
        let eval = |c: &Case| -> (f64, Vec<f32>) {
            let (out, _) = c.run(Device::Cpu, false).unwrap();
            let v = out.v_final.to_vec_f32().unwrap();
            let loss = v.iter().zip(&gvf).map(|(&v, &g)| v as f64 * g as f64).sum();
            (loss, out.spikes.to_vec_f32().unwrap())
        };
        let fd = |perturb: &dyn Fn(&mut Case, f32), eps: f32| -> Option<f64> {
            let (mut up, mut down) = (case.clone(), case.clone());
            perturb(&mut up, eps);
            perturb(&mut down, -eps);
            let ((lu, su), (ld, sd)) = (eval(&up), eval(&down));
            (su == spikes0 && sd == spikes0).then(|| (lu - ld) / (2.0 * eps as f64))
        };
        let check = |what: String, got: f32, want: Option<f64>| {
            if let Some(want) = want {
                assert!(
                    (got as f64 - want).abs() <= 2e-3 * (1.0 + want.abs()),
                    "{what}: {got} vs {want}"
                );
            }
        };
        let (gx, gv) = (
            grads.x.to_vec_f32().unwrap(),
            grads.v_init.unwrap().to_vec_f32().unwrap(),
        );
        let mut compared = 0;
        for i in 0..steps * n {
            let want = fd(&|c: &mut Case, e: f32| c.x[i] += e, 1e-2);
            compared += want.is_some() as usize;
            check(format!("{cfg:?} grad_x[{i}]"), gx[i], want);
        }
        for i in 0..n {
            let want = fd(&|c: &mut Case, e: f32| c.v_init.as_mut().unwrap()[i] += e, 1e-2);
            check(format!("{cfg:?} grad_v_init[{i}]"), gv[i], want);
        }
        if let Some(gw) = grads.w {
            let want = fd(&|c: &mut Case, e: f32| c.w += e, 1e-3);
            assert!(want.is_some(), "spikes changed under a w perturbation of 1e-3");
            check(format!("{cfg:?} grad_w"), gw.to_scalar_f32().unwrap(), want);
        }
        assert!(
            compared > steps * n / 2,
            "too few finite differences compared: {compared}"
        );
    }
}

/// Running T = T1 + T2 in two chunks, passing v_final on and grad_v_init back, gives the same
/// spikes, state and gradients as one run (bitwise; PLIF's grad_w up to summation order).
#[test]
fn temporal_chunks_compose() {
    let mut rng = Rng::new(5);
    for cfg in [NeuronConfig::lif(2.5), NeuronConfig::plif()] {
        let (steps, n, split) = (7, 10, 3);
        let whole = Case {
            cfg,
            shape: vec![steps, n],
            x: rng.vec(steps * n, -1.0, 2.5),
            v_init: Some(rng.vec(n, -0.5, 0.5)),
            w: 0.3,
            grad_spikes: rng.vec(steps * n, -1.0, 1.0),
            grad_v_final: None,
        };
        let (out, grads) = whole.run(Device::Cpu, true).unwrap();
        let first = Case {
            shape: vec![split, n],
            x: whole.x[..split * n].to_vec(),
            grad_spikes: whole.grad_spikes[..split * n].to_vec(),
            ..whole.clone()
        };
        let (out1, _) = first.run(Device::Cpu, false).unwrap();
        let second = Case {
            shape: vec![steps - split, n],
            x: whole.x[split * n..].to_vec(),
            v_init: Some(out1.v_final.to_vec_f32().unwrap()),
            grad_spikes: whole.grad_spikes[split * n..].to_vec(),
            ..whole.clone()
        };
        let (out2, grads2) = second.run(Device::Cpu, true).unwrap();
        let first = Case {
            grad_v_final: Some(grads2.v_init.unwrap().to_vec_f32().unwrap()),
            ..first
        };
        let (_, grads1) = first.run(Device::Cpu, true).unwrap();
        let cat = |a: &Tensor, b: &Tensor| [a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap()].concat();
        assert_eq!(cat(&out1.spikes, &out2.spikes), out.spikes.to_vec_f32().unwrap());
        assert_eq!(
            out2.v_final.to_vec_f32().unwrap(),
            out.v_final.to_vec_f32().unwrap()
        );
        assert_eq!(cat(&grads1.x, &grads2.x), grads.x.to_vec_f32().unwrap());
        assert_eq!(
            grads1.v_init.unwrap().to_vec_f32().unwrap(),
            grads.v_init.unwrap().to_vec_f32().unwrap()
        );
        if let (Some(w1), Some(w2), Some(w)) = (grads1.w, grads2.w, grads.w) {
            let sum = w1.to_scalar_f32().unwrap() + w2.to_scalar_f32().unwrap();
            let whole_w = w.to_scalar_f32().unwrap();
            assert!(
                (sum - whole_w).abs() <= 1e-5 * (1.0 + whole_w.abs()),
                "{sum} vs {whole_w}"
            );
        }
    }
}

/// The AVX-512, AVX2+FMA and baseline builds of the kernels (chosen at run time) give bitwise
/// identical results for every kind, reset, surrogate and PLIF gradient, so results do not
/// depend on the machine's vector width.
#[test]
fn every_vector_path_is_bitwise_identical_to_baseline() {
    use crate::cpu_isa::CpuIsa;
    let mut rng = Rng::new(17);
    let (steps, n) = (4, chunks::CHUNK + 300);
    let configs = [
        NeuronConfig::lif(1.333),
        NeuronConfig {
            kind: NeuronKind::Lif {
                tau: 3.0,
                decay_input: false,
            },
            v_reset: None,
            surrogate: Surrogate::ATan { alpha: 2.0 },
            ..NeuronConfig::lif(3.0)
        },
        NeuronConfig::plif(),
        NeuronConfig {
            kind: NeuronKind::Plif { decay_input: false },
            v_reset: Some(-0.3),
            detach_reset: true,
            ..NeuronConfig::plif()
        },
        NeuronConfig::if_neuron(),
    ];
    let bits = |t: &Tensor| {
        t.to_vec_f32()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    for cfg in configs {
        let case = Case {
            cfg,
            shape: vec![steps, n],
            x: rng.vec(steps * n, -2.0, 3.0),
            v_init: Some(rng.vec(n, -1.0, 1.0)),
            w: rng.uniform(-1.0, 1.0),
            grad_spikes: rng.vec(steps * n, -1.0, 1.0),
            grad_v_final: Some(rng.vec(n, -1.0, 1.0)),
        };
        let mut runs = Vec::new();
        for isa in CpuIsa::ALL {
            if !isa.available() {
                eprintln!("skipped: the {isa} neuron path (this CPU lacks its instructions)");
                continue;
            }
            chunks::force_test_path(Some(isa));
            let (out, grads) = case.run(Device::Cpu, true).unwrap();
            let mut all = vec![bits(&out.spikes), bits(&out.v_final), bits(&out.h_seq.unwrap())];
            all.push(bits(&grads.x));
            all.push(bits(&grads.v_init.unwrap()));
            all.extend(grads.w.map(|w| bits(&w)));
            runs.push((isa, all));
        }
        chunks::force_test_path(None);
        for (isa, run) in &runs[1..] {
            assert_eq!(&runs[0].1, run, "{isa} against {}: {cfg:?}", runs[0].0);
        }
    }
}

/// With an accumulator, PLIF's parameter gradient of a run split in two time chunks (second
/// chunk's backward first, the state gradient carried back) is bitwise the whole run's.
#[test]
fn plif_accumulator_is_bitwise_identical_across_time_chunks() {
    use crate::{DType, MemoryKind};
    let mut rng = Rng::new(23);
    let (steps, n, split) = (9, chunks::CHUNK + 77, 4);
    let cfg = NeuronConfig::plif();
    let t = |v: Vec<f32>, dims: &[usize]| Tensor::from_vec(v, dims, Device::Cpu, MemoryKind::Input).unwrap();
    let x = t(rng.vec(steps * n, -1.0, 2.5), &[steps, n]);
    let gs = t(rng.vec(steps * n, -1.0, 1.0), &[steps, n]);
    let w = t(vec![0.3], &[1]);
    let zeros = || Tensor::zeros([1], DType::F32, Device::Cpu, MemoryKind::Gradient).unwrap();

    let whole = neuron_forward(&cfg, &x, None, Some(&w), true).unwrap();
    let acc_whole = zeros();
    let h = whole.h_seq.unwrap();
    neuron_backward_with(&cfg, &gs, None, &h, None, Some(&w), false, Some(&acc_whole)).unwrap();

    let (x1, x2) = (
        x.narrow0(0, split).unwrap(),
        x.narrow0(split, steps - split).unwrap(),
    );
    let (g1, g2) = (
        gs.narrow0(0, split).unwrap(),
        gs.narrow0(split, steps - split).unwrap(),
    );
    let f1 = neuron_forward(&cfg, &x1, None, Some(&w), true).unwrap();
    let f2 = neuron_forward(&cfg, &x2, Some(&f1.v_final), Some(&w), true).unwrap();
    let acc = zeros();
    let b2 = neuron_backward_with(
        &cfg,
        &g2,
        None,
        f2.h_seq.as_ref().unwrap(),
        Some(&f1.v_final),
        Some(&w),
        true,
        Some(&acc),
    )
    .unwrap();
    let b1 = neuron_backward_with(
        &cfg,
        &g1,
        b2.v_init.as_ref(),
        f1.h_seq.as_ref().unwrap(),
        None,
        Some(&w),
        false,
        Some(&acc),
    )
    .unwrap();
    assert!(b1.w.is_none() && b2.w.is_none(), "accumulated, not returned");
    assert_eq!(acc.to_vec_f32().unwrap(), acc_whole.to_vec_f32().unwrap());
    assert_ne!(acc.to_vec_f32().unwrap(), vec![0.0]);
    let plain = neuron_backward_with(&cfg, &gs, None, &h, None, Some(&w), false, None).unwrap();
    assert_eq!(
        plain.w.unwrap().to_vec_f32().unwrap(),
        acc_whole.to_vec_f32().unwrap()
    );
}

/// Writing h_seq (kept for backward) or else the spikes over an input nobody else holds gives
/// bitwise the same results with one [T, ...] buffer less, on Meta and on the CPU alike; a
/// shared input is left untouched.
#[test]
fn reusing_the_input_for_h_seq_or_the_spikes_is_exact_and_saves_a_buffer() {
    use crate::{MemoryKind, MemoryTracker};
    let mut rng = Rng::new(29);
    let (steps, n) = (5, chunks::CHUNK + 19);
    let data = rng.vec(steps * n, -1.0, 2.5);
    for cfg in [NeuronConfig::lif(2.0), NeuronConfig::if_neuron()] {
        for save in [true, false] {
            let run = |device: Device, reuse: bool, keep: bool| {
                let tracker = MemoryTracker::new(device);
                let _g = MemoryTracker::install(tracker.clone());
                let x = Tensor::from_vec(data.clone(), [steps, n], device, MemoryKind::Activation).unwrap();
                let keeper = keep.then(|| x.clone());
                let out = if reuse {
                    neuron_forward(&cfg, x, None, None, save).unwrap()
                } else {
                    neuron_forward(&cfg, &x, None, None, save).unwrap()
                };
                let untouched = keeper.map(|k| k.to_vec_f32().unwrap() == data);
                assert!(out.spikes.is_spike(), "the spikes are flagged as spikes");
                let values = (device == Device::Cpu).then(|| {
                    (
                        out.spikes.to_vec_f32().unwrap(),
                        out.h_seq.as_ref().map(|h| h.to_vec_f32().unwrap()),
                        out.v_final.to_vec_f32().unwrap(),
                    )
                });
                (tracker.peak_bytes(), values, untouched)
            };
            let (plain_peak, plain, _) = run(Device::Cpu, false, false);
            let (reuse_peak, reused, _) = run(Device::Cpu, true, false);
            assert_eq!(reused, plain, "bit-identical (save {save})");
            assert_eq!(
                plain_peak - reuse_peak,
                (steps * n * 4) as u64,
                "one [T, n] f32 buffer less (save {save})"
            );
            assert_eq!(
                run(Device::META, true, false).0,
                reuse_peak,
                "Meta decides the same way"
            );
            let (shared_peak, shared, untouched) = run(Device::Cpu, true, true);
            assert_eq!(shared, plain);
            assert_eq!(shared_peak, plain_peak, "a shared input is not reused");
            assert_eq!(untouched, Some(true), "and not overwritten");
        }
    }
}
