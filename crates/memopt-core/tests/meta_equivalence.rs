//! One training-like sequence of kernels (conv, batch norm, spiking neuron, pooling, linear,
//! cross-entropy, their backward passes and an SGD update) run on Meta and on the CPU records
//! identical tracker event streams — action, bytes, kind, module path and phase, in order — and
//! identical current and peak figures, overall and per kind.

use memopt_core::kernels::{
    self, Conv2dParams, GradNeeds, NeuronConfig, Pool2dParams, RunningStats, SgdConfig, WeightGradAcc,
};
use memopt_core::memory::{MemoryAction, MemoryEvent, MemorySubscriber, Phase, enter_module, enter_phase};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Philox, Tensor};
use std::sync::{Arc, Mutex};

/// One event as compared: action, bytes, kind, module path, phase.
type Recorded = (MemoryAction, u64, MemoryKind, String, Phase);

#[derive(Default)]
struct Recorder(Mutex<Vec<Recorded>>);

impl MemorySubscriber for Recorder {
    fn on_event(&self, e: &MemoryEvent) {
        let mut v = self.0.lock().unwrap();
        v.push((
            e.action,
            e.bytes,
            e.kind,
            e.scope.path().to_string(),
            e.scope.phase(),
        ));
    }
}

type Trace = (
    Vec<(MemoryAction, u64, MemoryKind, String, Phase)>,
    memopt_core::memory::MemoryStats,
);

fn step(device: Device) -> Trace {
    step_on(MemoryTracker::new(device))
}

fn step_on(tracker: Arc<MemoryTracker>) -> Trace {
    let device = tracker.device();
    let _installed = MemoryTracker::install(tracker.clone());
    let recorder = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    {
        let (t, n) = (3, 2);
        let mut rng = Philox::new(42);
        let param = |dims: &[usize], rng: &mut Philox| {
            Tensor::rand_uniform(dims, -0.3, 0.3, rng, device, MemoryKind::Parameter).unwrap()
        };
        let conv_w = param(&[4, 2, 3, 3], &mut rng);
        let fc_w = param(&[5, 4 * 4 * 4], &mut rng);
        let bn_w = Tensor::full([4], 1.0, device, MemoryKind::Parameter).unwrap();
        let bn_b = Tensor::full([4], 0.0, device, MemoryKind::Parameter).unwrap();
        let rm = Tensor::full([4], 0.0, device, MemoryKind::Buffer).unwrap();
        let rv = Tensor::full([4], 1.0, device, MemoryKind::Buffer).unwrap();
        let momentum = Tensor::zeros(conv_w.dims(), DType::F32, device, MemoryKind::OptimizerState).unwrap();
        let x =
            Tensor::rand_uniform([t * n, 2, 8, 8], 0.0, 1.0, &mut rng, device, MemoryKind::Input).unwrap();
        let labels = Tensor::from_vec(vec![1i64, 3], [n], device, MemoryKind::Input).unwrap();
        let pad1 = Conv2dParams {
            padding: [1, 1],
            ..Conv2dParams::default()
        };
        let lif = NeuronConfig::lif(2.0);
        let pool = Pool2dParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
        };

        let _fwd = enter_phase(Phase::Forward);
        let (y, bn, spikes, pooled, idx, logits_seq, logits) = {
            let y = {
                let _m = enter_module("conv");
                kernels::conv2d(&x, &conv_w, None, &pad1, t).unwrap()
            };
            let bn = {
                let _m = enter_module("bn");
                kernels::batch_norm_train(kernels::BatchNormTrain {
                    x: &y,
                    weight: Some(&bn_w),
                    bias: Some(&bn_b),
                    running: Some(RunningStats { mean: &rm, var: &rv }),
                    momentum: 0.1,
                    eps: 1e-5,
                })
                .unwrap()
            };
            let sn = {
                let _m = enter_module("sn");
                kernels::neuron_forward(
                    &lif,
                    kernels::Operand::Lent(&bn.y.reshape([t, n, 4, 8, 8]).unwrap()),
                    None,
                    None,
                    true,
                )
                .unwrap()
            };
            let (pooled, idx) =
                kernels::max_pool2d(&sn.spikes.reshape([t * n, 4, 8, 8]).unwrap(), &pool).unwrap();
            let flat = pooled.reshape([t, n, 64]).unwrap();
            let logits_seq = kernels::linear(&flat, &fc_w, None, t).unwrap();
            let logits = kernels::mean_dim(&logits_seq, 0).unwrap();
            (y, bn, sn, pooled, idx, logits_seq, logits)
        };
        let _loss = kernels::cross_entropy(&logits, &labels).unwrap();
        drop(_fwd);

        let _bwd = enter_phase(Phase::Backward);
        let one = Tensor::full([], 1.0, device, MemoryKind::Gradient).unwrap();
        let g_logits = kernels::cross_entropy_backward(&one, &logits, &labels).unwrap();
        let g_seq = kernels::broadcast_dim(&g_logits, 0, t, 1.0 / t as f32).unwrap();
        let g_fc = Tensor::zeros(fc_w.dims(), DType::F32, device, MemoryKind::Gradient).unwrap();
        let acc = WeightGradAcc {
            weight: Some(&g_fc),
            bias: None,
            time_steps: t,
        };
        let g_flat = kernels::linear_backward(kernels::LinearBackward {
            grad: &g_seq,
            x: &pooled.reshape([t, n, 64]).unwrap(),
            w: &fc_w,
            has_bias: false,
            needs: GradNeeds::ALL,
            acc: Some(acc),
        })
        .unwrap()
        .x
        .unwrap();
        drop((logits_seq, g_seq));
        let g_spikes = kernels::max_pool2d_backward(
            &g_flat.reshape([t * n, 4, 4, 4]).unwrap(),
            &idx,
            &[t * n, 4, 8, 8],
        )
        .unwrap();
        let h = spikes.h_seq.as_ref().unwrap();
        let g_bn = kernels::neuron_backward(kernels::NeuronBackward {
            cfg: &lif,
            grad_spikes: (&g_spikes.reshape([t, n, 4, 8, 8]).unwrap()).into(),
            grad_v_final: None,
            h_seq: h,
            v_init: None,
            w: None,
            want_v_init_grad: false,
            w_acc: None,
        })
        .unwrap();
        let g_y = kernels::batch_norm_backward(kernels::BatchNormBackward {
            grad_y: (&g_bn.x.reshape([t * n, 4, 8, 8]).unwrap()).into(),
            x: &y,
            weight: Some(&bn_w),
            save_mean: &bn.save_mean,
            save_invstd: &bn.save_invstd,
            needs: GradNeeds::ALL,
        })
        .unwrap();
        let g_conv = {
            let _m = enter_module("conv");
            kernels::conv2d_backward(kernels::Conv2dBackward {
                grad: g_y.x.as_ref().unwrap(),
                x: &x,
                w: &conv_w,
                has_bias: false,
                params: &pad1,
                needs: GradNeeds {
                    input: true,
                    weight: true,
                    bias: false,
                },
                acc: None,
            })
            .unwrap()
        };
        drop(_bwd);

        let _opt = enter_phase(Phase::Optimizer);
        let sgd = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        };
        kernels::sgd_step(&conv_w, g_conv.w.as_ref().unwrap(), Some(&momentum), &sgd, true).unwrap();
        kernels::sgd_step(&fc_w, &g_fc, None, &SgdConfig { momentum: 0.0, ..sgd }, true).unwrap();
    }
    let events = recorder.0.lock().unwrap().clone();
    (events, tracker.stats())
}

#[test]
fn meta_and_cpu_record_identical_event_streams_and_peaks() {
    let (cpu_events, cpu) = step(Device::Cpu);
    let (meta_events, meta) = step(Device::META);
    assert!(
        cpu_events.len() > 50,
        "the sequence allocates: {} events",
        cpu_events.len()
    );
    assert_eq!(cpu_events, meta_events);
    assert_eq!(cpu.peak, meta.peak);
    assert_eq!(cpu.by_kind, meta.by_kind);
    assert_eq!(
        (cpu.allocated_peak, cpu.reserved_peak, cpu.segments, cpu.reserved),
        (
            meta.allocated_peak,
            meta.reserved_peak,
            meta.segments,
            meta.reserved
        ),
        "the caching allocator decides alike with and without memory behind it"
    );
    assert!(cpu.peak <= cpu.allocated_peak && cpu.allocated_peak <= cpu.reserved_peak);
    assert!(
        cpu.allocated_peak > cpu.peak,
        "small tensors are rounded up to 512 B blocks"
    );
    assert_eq!(cpu.current, 0, "everything was freed");
    for kind in [
        MemoryKind::Parameter,
        MemoryKind::Gradient,
        MemoryKind::Workspace,
        MemoryKind::OptimizerState,
        MemoryKind::Activation,
    ] {
        assert!(cpu.kind(kind).peak > 0, "{kind} was used");
    }
    assert!(
        cpu_events
            .iter()
            .any(|e| e.3 == "conv" && e.2 == MemoryKind::Workspace),
        "the conv's workspace (flipped weights of its input gradient) is attributed to its module"
    );
}

/// A counting tracker (no caching allocator behind it) records the Meta tracker's event stream
/// and its requested figures, overall and per kind, with allocated bytes equal to requested
/// ones and nothing reserved.
#[test]
fn a_counting_tracker_records_the_requested_figures_of_meta() {
    let (meta_events, meta) = step(Device::META);
    let counting = MemoryTracker::counting(memopt_core::Target::Cpu);
    assert!(counting.is_counting() && !MemoryTracker::new(Device::META).is_counting());
    let (events, counted) = step_on(counting);
    assert_eq!(events, meta_events);
    assert_eq!((counted.current, counted.peak), (meta.current, meta.peak));
    for (c, m) in counted.by_kind.iter().zip(&meta.by_kind) {
        assert_eq!((c.current, c.peak), (m.current, m.peak));
        assert_eq!((c.allocated, c.allocated_peak), (c.current, c.peak));
    }
    assert_eq!((counted.allocated_peak, counted.reserved_peak), (counted.peak, 0));
    assert!(
        meta.allocated_peak > meta.peak,
        "Meta rounds to blocks; counting does not"
    );
    // No host memory behind it.
    assert!(
        MemoryTracker::counting(memopt_core::Target::Cpu)
            .allocate_host(8, MemoryKind::Activation)
            .is_err()
    );
}
