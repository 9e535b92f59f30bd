//! Tests of matmul and linear, plus helpers shared with the conv tests: seeded values, tensors,
//! tolerant comparison and tracker event recording.

use super::*;
use crate::memory::{MemoryAction, MemoryEvent, MemorySubscriber};
use crate::{Device, MemoryTracker};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

/// `len` values in [-1, 1) from `seed` (splitmix64).
pub(crate) fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// An input tensor of `dims` with seeded values on `device`.
pub(crate) fn tensor(dims: &[usize], seed: u64, device: Device) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_vec(values(n, seed), dims.to_vec(), device, MemoryKind::Input).unwrap()
}

/// Asserts `|got - want| <= tol * (1 + |want|)` elementwise, naming `what` and the index.
pub(crate) fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// One tracker event as compared across devices.
pub(crate) type Ev = (MemoryAction, u64, MemoryKind);

#[derive(Default)]
struct Collect(Mutex<Vec<Ev>>);

impl MemorySubscriber for Collect {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push((e.action, e.bytes, e.kind));
    }
}

/// Runs `f` with a fresh tracker for `device` installed and returns the events it recorded.
pub(crate) fn events_of(device: Device, f: impl FnOnce(Device)) -> Vec<Ev> {
    let tracker = MemoryTracker::new(device);
    let _guard = MemoryTracker::install(tracker.clone());
    let collect = Arc::new(Collect::default());
    let _sub = tracker.subscribe(collect.clone());
    f(device);
    let events = collect.0.lock().unwrap().clone();
    assert_eq!(tracker.current_bytes(), 0, "everything freed on {device}");
    events
}

fn ref_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                out[i * n + j] += a[i * k + l] as f64 * b[l * n + j] as f64;
            }
        }
    }
    out
}

fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; a.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

/// Reference linear: x [m, k], w [n, k], b [n] -> [m, n].
fn ref_linear(x: &[f32], w: &[f32], b: Option<&[f32]>, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = ref_matmul(x, &transpose(w, n, k), m, k, n);
    if let Some(b) = b {
        for (i, o) in out.iter_mut().enumerate() {
            *o += b[i % n] as f64;
        }
    }
    out
}

/// Leading dimensions of a linear input with `m` rows: [m], [2, m/2] or [] shapes.
fn lead_dims(m: usize, split: bool) -> Vec<usize> {
    if split && m.is_multiple_of(2) {
        vec![2, m / 2]
    } else {
        vec![m]
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn matmul_matches_naive(m in 1usize..40, k in 0usize..40, n in 1usize..40, seed in any::<u64>()) {
        let a = tensor(&[m, k], seed, Device::Cpu);
        let b = tensor(&[k, n], seed ^ 1, Device::Cpu);
        let out = matmul(&a, &b).unwrap();
        prop_assert_eq!(out.dims(), &[m, n]);
        prop_assert_eq!(out.kind(), MemoryKind::Activation);
        let want = ref_matmul(&a.to_vec_f32().unwrap(), &b.to_vec_f32().unwrap(), m, k, n);
        assert_close("matmul", &out.to_vec_f32().unwrap(), &want, 1e-5 * (k as f64 + 1.0));
    }

    #[test]
    fn linear_forward_and_backward_match_naive(
        m in 1usize..24, k in 1usize..24, n in 1usize..24, split in any::<bool>(),
        bias in any::<bool>(), needs in any::<(bool, bool, bool)>(), seed in any::<u64>(),
    ) {
        let mut xd = lead_dims(m, split);
        xd.push(k);
        let x = tensor(&xd, seed, Device::Cpu);
        let w = tensor(&[n, k], seed ^ 1, Device::Cpu);
        let b = tensor(&[n], seed ^ 2, Device::Cpu);
        let out = linear(&x, &w, bias.then_some(&b), 1).unwrap();
        let mut od = lead_dims(m, split);
        od.push(n);
        prop_assert_eq!(out.dims(), od.as_slice());
        let (xv, wv, bv) = (x.to_vec_f32().unwrap(), w.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        let want = ref_linear(&xv, &wv, bias.then_some(bv.as_slice()), m, k, n);
        assert_close("linear", &out.to_vec_f32().unwrap(), &want, 1e-5 * (k as f64 + 1.0));

        let grad = tensor(&od, seed ^ 3, Device::Cpu);
        let gv = grad.to_vec_f32().unwrap();
        let needs = GradNeeds { input: needs.0, weight: needs.1, bias: needs.2 };
        let gr = crate::kernels::testkit::linear_backward_with(&grad, &x, &w, bias, needs).unwrap();
        prop_assert_eq!(gr.x.is_some(), needs.input);
        prop_assert_eq!(gr.w.is_some(), needs.weight);
        prop_assert_eq!(gr.b.is_some(), needs.bias && bias);
        if let Some(gx) = gr.x {
            prop_assert_eq!(gx.dims(), x.dims());
            prop_assert_eq!(gx.kind(), MemoryKind::Gradient);
            let want = ref_matmul(&gv, &wv, m, n, k);
            assert_close("grad x", &gx.to_vec_f32().unwrap(), &want, 1e-5 * (n as f64 + 1.0));
        }
        if let Some(gw) = gr.w {
            prop_assert_eq!(gw.dims(), &[n, k]);
            let want = ref_matmul(&transpose(&gv, m, n), &xv, n, m, k);
            assert_close("grad w", &gw.to_vec_f32().unwrap(), &want, 1e-5 * (m as f64 + 1.0));
        }
        if let Some(gb) = gr.b {
            let want: Vec<f64> = (0..n).map(|j| (0..m).map(|i| gv[i * n + j] as f64).sum()).collect();
            assert_close("grad b", &gb.to_vec_f32().unwrap(), &want, 1e-6);
        }
    }
}

/// L = sum(linear(x, w, b, 1) * r), in f64.
fn linear_loss(x: &Tensor, w: &Tensor, b: &Tensor, r: &[f32]) -> f64 {
    let out = linear(x, w, Some(b), 1).unwrap().to_vec_f32().unwrap();
    out.iter().zip(r).map(|(&o, &r)| o as f64 * r as f64).sum()
}

/// Central difference of `loss` along each element of `t` (perturbed in place through a copy).
pub(crate) fn central_differences(t: &Tensor, eps: f32, loss: impl Fn(&Tensor) -> f64) -> Vec<f64> {
    let base = t.to_vec_f32().unwrap();
    (0..base.len())
        .map(|i| {
            let at = |d: f32| {
                let mut v = base.clone();
                v[i] += d;
                let p = Tensor::from_vec(v, t.shape().clone(), Device::Cpu, MemoryKind::Input).unwrap();
                loss(&p)
            };
            (at(eps) - at(-eps)) / (2.0 * eps as f64)
        })
        .collect()
}

#[test]
fn linear_backward_matches_finite_differences() {
    // linear is affine in each argument, so central differences are exact up to rounding and a
    // large step keeps the rounding small.
    let (x, w, b) = (
        tensor(&[2, 3, 5], 11, Device::Cpu),
        tensor(&[4, 5], 12, Device::Cpu),
        tensor(&[4], 13, Device::Cpu),
    );
    let r = tensor(&[2, 3, 4], 14, Device::Cpu);
    let rv = r.to_vec_f32().unwrap();
    let g = crate::kernels::testkit::linear_backward_with(&r, &x, &w, true, GradNeeds::ALL).unwrap();
    let eps = 0.25;
    let fx = central_differences(&x, eps, |x| linear_loss(x, &w, &b, &rv));
    let fw = central_differences(&w, eps, |w| linear_loss(&x, w, &b, &rv));
    let fb = central_differences(&b, eps, |b| linear_loss(&x, &w, b, &rv));
    assert_close("fd x", &g.x.unwrap().to_vec_f32().unwrap(), &fx, 1e-4);
    assert_close("fd w", &g.w.unwrap().to_vec_f32().unwrap(), &fw, 1e-4);
    assert_close("fd b", &g.b.unwrap().to_vec_f32().unwrap(), &fb, 1e-4);
}

#[test]
fn meta_matches_cpu_shapes_and_events() {
    let run = |dev: Device| {
        let a = tensor(&[7, 9], 1, dev);
        let b = tensor(&[9, 5], 2, dev);
        assert_eq!(matmul(&a, &b).unwrap().dims(), &[7, 5]);
        let x = tensor(&[3, 7, 9], 3, dev);
        let w = tensor(&[5, 9], 4, dev);
        let bias = tensor(&[5], 5, dev);
        let y = linear(&x, &w, Some(&bias), 1).unwrap();
        assert_eq!(y.dims(), &[3, 7, 5]);
        for needs in [
            GradNeeds::ALL,
            GradNeeds {
                input: false,
                weight: true,
                bias: false,
            },
            GradNeeds {
                input: true,
                weight: false,
                bias: true,
            },
        ] {
            let g = crate::kernels::testkit::linear_backward_with(&y, &x, &w, true, needs).unwrap();
            assert_eq!(g.x.map(|t| t.dims().to_vec()), needs.input.then(|| vec![3, 7, 9]));
            assert_eq!(g.w.map(|t| t.dims().to_vec()), needs.weight.then(|| vec![5, 9]));
            assert_eq!(g.b.map(|t| t.dims().to_vec()), needs.bias.then(|| vec![5]));
        }
    };
    let cpu = events_of(Device::Cpu, run);
    let meta = events_of(Device::META, run);
    assert!(cpu.len() > 10);
    assert_eq!(cpu, meta);
}

#[test]
fn errors_name_the_problem() {
    let cpu = Device::Cpu;
    let e = matmul(&tensor(&[2, 3], 0, cpu), &tensor(&[4, 2], 0, cpu))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("matmul") && e.contains("3 rows") && e.contains("[4, 2]"),
        "{e}"
    );
    let e = matmul(&tensor(&[2, 3, 1], 0, cpu), &tensor(&[3, 2], 0, cpu))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 2"), "{e}");
    let half = tensor(&[3, 2], 0, cpu).to_dtype(crate::DType::F16).unwrap();
    let e = matmul(&tensor(&[2, 3], 0, cpu), &half).unwrap_err().to_string();
    assert!(e.contains("expected dtype f32, got f16"), "{e}");
    let e = matmul(&tensor(&[2, 3], 0, cpu), &tensor(&[3, 2], 0, Device::META)).unwrap_err();
    assert!(matches!(e, CoreError::DeviceMismatch { .. }), "{e}");

    let (x, w) = (tensor(&[4, 3], 0, cpu), tensor(&[5, 3], 0, cpu));
    let e = linear(&tensor(&[4, 2], 0, cpu), &w, None, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linear") && e.contains("[.., 3]"), "{e}");
    let e = linear(&x, &tensor(&[15], 0, cpu), None, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 2"), "{e}");
    let e = linear(&x, &w, Some(&tensor(&[4], 0, cpu)), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bias of shape [5]"), "{e}");
    let e = linear(&tensor(&[], 0, cpu), &w, None, 1).unwrap_err().to_string();
    assert!(e.contains("[.., 3]"), "{e}");
    let e =
        crate::kernels::testkit::linear_backward_with(&tensor(&[4, 4], 0, cpu), &x, &w, true, GradNeeds::ALL)
            .unwrap_err()
            .to_string();
    assert!(e.contains("linear_backward") && e.contains("[4, 5]"), "{e}");
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // Big enough for parallel GEMMs and column sums.
    let x = tensor(&[300, 257], 1, Device::Cpu);
    let w = tensor(&[130, 257], 2, Device::Cpu);
    let g = tensor(&[300, 130], 3, Device::Cpu);
    let run = || {
        let y = linear(&x, &w, None, 1).unwrap().to_vec_f32().unwrap();
        let gr = crate::kernels::testkit::linear_backward_with(&g, &x, &w, true, GradNeeds::ALL).unwrap();
        let v = |t: Option<Tensor>| t.unwrap().to_vec_f32().unwrap();
        (y, v(gr.x), v(gr.w), v(gr.b))
    };
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    assert_eq!(one.install(run), three.install(run));
}
