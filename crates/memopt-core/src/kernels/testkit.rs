//! Helpers for kernel tests: tracker event streams on Meta versus CPU, tensors from vectors,
//! central finite differences and closeness checks.

use crate::memory::{MemoryAction, MemoryEvent, MemorySubscriber, MemoryTracker};
use crate::{Device, Element, MemoryKind, Tensor};
use std::sync::{Arc, Mutex};

/// One tracker event reduced to what must agree between devices.
pub type EventKey = (MemoryAction, u64, MemoryKind);

#[derive(Default)]
struct Log(Mutex<Vec<EventKey>>);

impl MemorySubscriber for Log {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push((e.action, e.bytes, e.kind));
    }
}

/// Runs `f(device)` with a fresh tracker for `device` installed on this thread and returns the
/// events it recorded with `f`'s result.
pub fn record<R>(device: Device, f: impl FnOnce(Device) -> R) -> (Vec<EventKey>, R) {
    let tracker = MemoryTracker::new(device);
    let _guard = MemoryTracker::install(tracker.clone());
    let log = Arc::new(Log::default());
    let sub = tracker.subscribe(log.clone());
    let r = f(device);
    drop(sub);
    let events = log.0.lock().unwrap().clone();
    (events, r)
}

/// Runs `f` on the CPU and on Meta and asserts that both return the same shapes and record the
/// same event stream (action, bytes, kind), which must not be empty.
pub fn assert_meta_matches_cpu(f: impl Fn(Device) -> Vec<Vec<usize>>) {
    let (cpu_events, cpu_shapes) = record(Device::Cpu, &f);
    let (meta_events, meta_shapes) = record(Device::META, &f);
    assert!(!cpu_events.is_empty(), "the closure recorded no events");
    assert_eq!(
        cpu_shapes, meta_shapes,
        "output shapes differ between cpu and meta"
    );
    assert_eq!(
        cpu_events, meta_events,
        "event streams differ between cpu and meta"
    );
}

/// A tensor of `dims` holding `data` on `device` (kind Input; data dropped on Meta).
pub fn tensor<T: Element>(data: Vec<T>, dims: &[usize], device: Device) -> Tensor {
    Tensor::from_vec(data, dims, device, MemoryKind::Input).unwrap()
}

/// An f32 CPU tensor.
pub fn cpu(data: &[f32], dims: &[usize]) -> Tensor {
    tensor(data.to_vec(), dims, Device::Cpu)
}

/// `n` deterministic pseudo-random values in `[-1, 1)` from `seed` (for Meta tests and
/// finite-difference checks where proptest is not needed).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let rng = crate::RngState { seed, offset: 0 };
    (0..n).map(|i| 2.0 * rng.uniform_at(i as u64) - 1.0).collect()
}

/// Central finite differences of `f` at `x` with step `h`, evaluated in f64.
pub fn central_diff(x: &[f32], h: f32, f: impl Fn(&[f32]) -> f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            xp[i] = x[i] + h;
            let up = f(&xp);
            xp[i] = x[i] - h;
            let down = f(&xp);
            xp[i] = x[i];
            (up - down) / (2.0 * h as f64)
        })
        .collect()
}

/// `sum out[i] * w[i]` in f64: a scalar loss whose gradient with respect to `out` is `w`.
pub fn dot(out: &[f32], w: &[f32]) -> f64 {
    assert_eq!(out.len(), w.len());
    out.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum()
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise, naming `what` and the index.
pub fn assert_close(got: &[f32], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = atol + rtol * w.abs();
        assert!(
            (g as f64 - w).abs() <= tol || (g.is_nan() && w.is_nan()),
            "{what}[{i}]: got {g}, want {w} (tolerance {tol})"
        );
    }
}

/// [`crate::kernels::neuron_backward`] with positional arguments and the spikes' gradient lent.
#[allow(clippy::too_many_arguments)]
pub fn neuron_backward_with(
    cfg: &crate::kernels::NeuronConfig,
    grad_spikes: &Tensor,
    grad_v_final: Option<&Tensor>,
    h_seq: &Tensor,
    v_init: Option<&Tensor>,
    w: Option<&Tensor>,
    want_v_init_grad: bool,
    w_acc: Option<&Tensor>,
) -> crate::Result<crate::kernels::NeuronGrads> {
    crate::kernels::neuron_backward(crate::kernels::NeuronBackward {
        cfg,
        grad_spikes: grad_spikes.into(),
        grad_v_final,
        h_seq,
        v_init,
        w,
        want_v_init_grad,
        w_acc,
    })
}

/// [`crate::kernels::batch_norm_backward`] with positional arguments and the output gradient
/// lent.
pub fn batch_norm_backward_with(
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    save_mean: &Tensor,
    save_invstd: &Tensor,
    needs: crate::kernels::GradNeeds,
) -> crate::Result<crate::kernels::BatchNormGrads> {
    crate::kernels::batch_norm_backward(crate::kernels::BatchNormBackward {
        grad_y: grad_y.into(),
        x,
        weight,
        save_mean,
        save_invstd,
        needs,
    })
}

/// [`crate::kernels::batch_norm_train`] with positional arguments.
pub fn batch_norm_train_with<'a>(
    x: &'a Tensor,
    weight: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
    running: Option<crate::kernels::RunningStats<'a>>,
    momentum: f32,
    eps: f32,
) -> crate::Result<crate::kernels::BatchNormOutput> {
    crate::kernels::batch_norm_train(crate::kernels::BatchNormTrain {
        x,
        weight,
        bias,
        running,
        momentum,
        eps,
    })
}

/// [`crate::kernels::conv2d_backward`] with positional arguments and no accumulators.
pub fn conv2d_backward_with(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    has_bias: bool,
    params: &crate::kernels::Conv2dParams,
    needs: crate::kernels::GradNeeds,
) -> crate::Result<crate::kernels::Conv2dGrads> {
    crate::kernels::conv2d_backward(crate::kernels::Conv2dBackward {
        grad,
        x,
        w,
        has_bias,
        params,
        needs,
        acc: None,
    })
}

/// [`crate::kernels::linear_backward`] with positional arguments and no accumulators.
pub fn linear_backward_with(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    has_bias: bool,
    needs: crate::kernels::GradNeeds,
) -> crate::Result<crate::kernels::LinearGrads> {
    crate::kernels::linear_backward(crate::kernels::LinearBackward {
        grad,
        x,
        w,
        has_bias,
        needs,
        acc: None,
    })
}

/// [`crate::kernels::adam_step`] with positional arguments.
pub fn adam_step_with(
    param: &Tensor,
    grad: &Tensor,
    m: &Tensor,
    v: &Tensor,
    cfg: &crate::kernels::AdamConfig,
    step: u64,
) -> crate::Result<()> {
    crate::kernels::adam_step(crate::kernels::AdamStep {
        param,
        grad,
        m,
        v,
        cfg,
        step,
    })
}
