//! Meta/CPU equivalence of shapes and tracker events, and error reporting.

use super::{Case, Rng, tensor};
use crate::kernels::testkit::neuron_backward_with;
use crate::kernels::*;
use crate::memory::{MemoryAction, MemoryEvent, MemorySubscriber};
use crate::{Device, MemoryKind, MemoryTracker, Tensor};
use std::sync::{Arc, Mutex};

/// Tracker events as (action, bytes, kind).
type Events = Vec<(MemoryAction, u64, MemoryKind)>;

#[derive(Default)]
struct Recorder(Mutex<Events>);

impl MemorySubscriber for Recorder {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push((e.action, e.bytes, e.kind));
    }
}

/// Runs `case` forward and backward on `device` under a fresh tracker; returns the output and
/// gradient shapes and the tracker's event stream.
fn traced(case: &Case, device: Device, want_v_init_grad: bool) -> (Vec<Vec<usize>>, Events) {
    let tracker = MemoryTracker::new(device);
    let _guard = MemoryTracker::install(tracker.clone());
    let rec = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(rec.clone());
    let shapes = {
        let (out, grads) = case.run(device, want_v_init_grad).unwrap();
        let mut shapes = vec![out.spikes.dims().to_vec(), out.v_final.dims().to_vec()];
        shapes.extend(out.h_seq.map(|h| h.dims().to_vec()));
        shapes.push(grads.x.dims().to_vec());
        shapes.extend(grads.v_init.map(|g| g.dims().to_vec()));
        shapes.extend(grads.w.map(|g| g.dims().to_vec()));
        shapes
    };
    assert_eq!(tracker.current_bytes(), 0, "everything is freed");
    let events = rec.0.lock().unwrap().clone();
    (shapes, events)
}

#[test]
fn meta_and_cpu_allocate_identically() {
    let mut rng = Rng::new(3);
    let configs = [
        NeuronConfig::lif(2.0),
        NeuronConfig::if_neuron(),
        NeuronConfig::plif(),
        NeuronConfig {
            v_reset: None,
            ..NeuronConfig::plif()
        },
    ];
    for (i, cfg) in configs.into_iter().enumerate() {
        // The last shape spans several chunks (PLIF's workspace has one slot per chunk).
        let shape = [vec![4, 3, 5], vec![2, 7], vec![2, 20000], vec![1, 2, 2, 2]][i].clone();
        let n: usize = shape[1..].iter().product();
        let steps = shape[0];
        let case = Case {
            cfg,
            x: rng.vec(steps * n, -1.0, 2.0),
            v_init: (i % 2 == 0).then(|| rng.vec(n, 0.0, 0.5)),
            w: 0.1,
            grad_spikes: rng.vec(steps * n, -1.0, 1.0),
            grad_v_final: (i % 2 == 1).then(|| rng.vec(n, -1.0, 1.0)),
            shape,
        };
        for want in [false, true] {
            let (cpu_shapes, cpu_events) = traced(&case, Device::Cpu, want);
            let (meta_shapes, meta_events) = traced(&case, Device::META, want);
            assert_eq!(cpu_shapes, meta_shapes);
            assert_eq!(cpu_events, meta_events, "{cfg:?}");
            // Inputs (x, v_init?, w?, grad_spikes, grad_v_final?), forward 3 outputs, backward
            // outputs and PLIF workspace: every allocation is freed again.
            let allocs = cpu_events.iter().filter(|e| e.0 == MemoryAction::Alloc).count();
            let frees = cpu_events.iter().filter(|e| e.0 == MemoryAction::Free).count();
            assert_eq!(allocs, frees);
            let is_plif = case.is_plif();
            let ws: Vec<_> = cpu_events
                .iter()
                .filter(|e| e.2 == MemoryKind::Workspace && e.0 == MemoryAction::Alloc)
                .collect();
            let blocks = n.div_ceil(super::super::PLIF_PARTIAL_NEURONS) as u64;
            assert_eq!(ws.len(), is_plif as usize);
            if is_plif {
                assert_eq!(ws[0].1, 4 * blocks * steps as u64);
            }
            let grads: u64 = cpu_events
                .iter()
                .filter(|e| e.2 == MemoryKind::Gradient && e.0 == MemoryAction::Alloc)
                .map(|e| e.1)
                .sum();
            let want_grad_bytes = 4 * (steps * n + if want { n } else { 0 } + is_plif as usize) as u64;
            assert_eq!(grads, want_grad_bytes);
        }
    }
}

#[test]
fn forward_allocates_only_its_outputs() {
    let tracker = MemoryTracker::new(Device::META);
    let _guard = MemoryTracker::install(tracker.clone());
    let x = Tensor::full([8, 16, 32], 0.0, Device::META, MemoryKind::Input).unwrap();
    let base = tracker.current_bytes();
    tracker.reset_peak();
    let out = neuron_forward(&NeuronConfig::lif(2.0), &x, None, None, false).unwrap();
    assert!(out.h_seq.is_none());
    let outputs = (8 * 16 * 32 + 16 * 32) * 4;
    assert_eq!(tracker.current_bytes() - base, outputs);
    assert_eq!(tracker.peak_bytes() - base, outputs);
    assert_eq!(out.spikes.kind(), MemoryKind::Activation);
    assert_eq!(out.v_final.kind(), MemoryKind::Activation);
    assert!(out.spikes.is_spike() && !out.v_final.is_spike());
    let out = neuron_forward(&NeuronConfig::lif(2.0), &x, None, None, true).unwrap();
    assert_eq!(out.h_seq.unwrap().dims(), &[8, 16, 32]);
}

fn err_of<T: std::fmt::Debug>(r: crate::Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn errors_name_the_problem() {
    let dev = Device::Cpu;
    let lif = NeuronConfig::lif(2.0);
    let plif = NeuronConfig::plif();
    let x = tensor(vec![0.0; 12], &[3, 4], dev);
    let state = tensor(vec![0.0; 4], &[4], dev);
    let w = tensor(vec![0.0], &[1], dev);

    // Shapes of x.
    let e = err_of(neuron_forward(
        &lif,
        tensor(vec![0.0; 0], &[0, 4], dev),
        None,
        None,
        false,
    ));
    assert!(e.contains("neuron_forward") && e.contains("T = 0"), "{e}");
    let e = err_of(neuron_forward(
        &lif,
        tensor(vec![1.0], &[], dev),
        None,
        None,
        false,
    ));
    assert!(e.contains("scalar") && e.contains("[T, ...]"), "{e}");
    // v_init shape.
    let bad = tensor(vec![0.0; 3], &[3], dev);
    let e = err_of(neuron_forward(&lif, &x, Some(&bad), None, false));
    assert!(e.contains("v_init of shape [4]") && e.contains("got [3]"), "{e}");
    // PLIF parameter.
    let e = err_of(neuron_forward(&plif, &x, None, None, false));
    assert!(e.contains("PLIF") && e.contains("w"), "{e}");
    let e = err_of(neuron_forward(
        &plif,
        &x,
        None,
        Some(&tensor(vec![0.0; 2], &[2], dev)),
        false,
    ));
    assert!(e.contains("w of shape [1]") && e.contains("[2]"), "{e}");
    let e = err_of(neuron_forward(&lif, &x, None, Some(&w), false));
    assert!(e.contains("pass None"), "{e}");
    // Invalid configs.
    for (cfg, needle) in [
        (NeuronConfig::lif(1.0), "tau"),
        (NeuronConfig::lif(f32::NAN), "tau"),
        (
            NeuronConfig {
                surrogate: Surrogate::ATan { alpha: 0.0 },
                ..lif
            },
            "alpha",
        ),
        (
            NeuronConfig {
                v_threshold: f32::INFINITY,
                ..lif
            },
            "v_threshold",
        ),
        (
            NeuronConfig {
                v_reset: Some(f32::NAN),
                ..lif
            },
            "v_reset",
        ),
    ] {
        assert!(cfg.validate().is_err());
        let e = err_of(neuron_forward(&cfg, &x, None, None, false));
        assert!(e.contains(needle), "{e}");
        let e = err_of(neuron_backward_with(&cfg, &x, None, &x, None, None, false, None));
        assert!(e.contains(needle), "{e}");
    }
    // dtype and device.
    let e = err_of(neuron_forward(
        &lif,
        x.to_dtype(crate::DType::F16).unwrap(),
        None,
        None,
        false,
    ));
    assert!(e.contains("expected dtype f32"), "{e}");
    let meta_state = Tensor::full([4], 0.0, Device::META, MemoryKind::Input).unwrap();
    let e = err_of(neuron_forward(&lif, &x, Some(&meta_state), None, false));
    assert!(e.contains("different devices"), "{e}");

    // Backward shapes.
    let h5 = tensor(vec![0.0; 15], &[3, 5], dev);
    let e = err_of(neuron_backward_with(&lif, &x, None, &h5, None, None, false, None));
    assert!(e.contains("h_seq") && e.contains("[3, 5]"), "{e}");
    let e = err_of(neuron_backward_with(
        &lif,
        &x,
        Some(&bad),
        &x,
        None,
        None,
        false,
        None,
    ));
    assert!(e.contains("grad_v_final of shape [4]"), "{e}");
    let e = err_of(neuron_backward_with(
        &lif,
        &x,
        None,
        &x,
        Some(&bad),
        None,
        false,
        None,
    ));
    assert!(e.contains("v_init of shape [4]"), "{e}");
    let e = err_of(neuron_backward_with(&plif, &x, None, &x, None, None, false, None));
    assert!(e.contains("PLIF"), "{e}");
    let e = err_of(neuron_backward_with(
        &lif,
        &tensor(vec![], &[0, 4], dev),
        None,
        &x,
        None,
        None,
        false,
        None,
    ));
    assert!(e.contains("T = 0"), "{e}");
    let e = err_of(neuron_backward_with(
        &lif,
        &tensor(vec![1.0], &[], dev),
        None,
        &x,
        None,
        None,
        false,
        None,
    ));
    assert!(e.contains("scalar"), "{e}");
    // Valid calls still work with all the pieces.
    let g = neuron_backward_with(&plif, &x, Some(&state), &x, Some(&state), Some(&w), true, None).unwrap();
    assert_eq!(g.w.unwrap().dims(), &[1]);
}

#[test]
fn rank_one_sequences_and_empty_steps() {
    // x [T] has scalar states.
    let x = tensor(vec![0.6, 0.6, 0.6], &[3], Device::Cpu);
    let out = neuron_forward(&NeuronConfig::if_neuron(), &x, None, None, true).unwrap();
    assert_eq!(out.spikes.to_vec_f32().unwrap(), vec![0.0, 1.0, 0.0]);
    assert_eq!(out.v_final.dims(), &[] as &[usize]);
    assert!((out.v_final.to_scalar_f32().unwrap() - 0.6).abs() < 1e-6);
    // x [T, 0] has no neurons.
    let x = tensor(vec![], &[2, 0], Device::Cpu);
    let out = neuron_forward(
        &NeuronConfig::plif(),
        &x,
        None,
        Some(&tensor(vec![0.0], &[1], Device::Cpu)),
        true,
    )
    .unwrap();
    assert_eq!(out.spikes.dims(), &[2, 0]);
}
