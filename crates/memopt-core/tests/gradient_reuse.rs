//! Backward kernels that write the input gradient over the output gradient when nothing else
//! holds it: bit-identical results, one buffer less, the same decision on Meta, and a shared
//! gradient is never overwritten.

use memopt_core::kernels::{self, GradNeeds, NeuronConfig, Operand};
use memopt_core::{Device, MemoryKind, MemoryTracker, Philox, Tensor};

fn rand(dims: &[usize], device: Device, kind: MemoryKind, seed: u64) -> Tensor {
    Tensor::rand_uniform(dims, -1.0, 1.0, &mut Philox::new(seed), device, kind).unwrap()
}

/// Runs `f` on a fresh tracker; returns its peak bytes and result.
fn tracked<R>(device: Device, f: impl FnOnce() -> R) -> (u64, R) {
    let tracker = MemoryTracker::new(device);
    let _g = MemoryTracker::install(tracker.clone());
    let r = f();
    (tracker.peak_bytes(), r)
}

#[test]
fn batch_norm_backward_reuses_an_unshared_gradient() {
    let dims = [6, 3, 5, 5];
    let run = |device: Device, reuse: bool, share: bool| {
        tracked(device, || {
            let x = rand(&dims, device, MemoryKind::Activation, 1);
            let w = rand(&[3], device, MemoryKind::Parameter, 2);
            let out = kernels::batch_norm_train(kernels::BatchNormTrain {
                x: &x,
                weight: Some(&w),
                bias: None,
                running: None,
                momentum: 0.1,
                eps: 1e-5,
            })
            .unwrap();
            let g = rand(&dims, device, MemoryKind::Gradient, 3);
            let keeper = share.then(|| g.clone());
            let before = keeper.as_ref().and_then(|k| k.to_vec_f32().ok());
            // Handed over (may be overwritten) or lent (only read).
            let grad_y = if reuse {
                Operand::Given(g)
            } else {
                Operand::Lent(&g)
            };
            let r = kernels::batch_norm_backward(kernels::BatchNormBackward {
                grad_y,
                x: &x,
                weight: Some(&w),
                save_mean: &out.save_mean,
                save_invstd: &out.save_invstd,
                needs: GradNeeds::ALL,
            })
            .unwrap();
            let untouched = keeper.map(|k| k.to_vec_f32().ok() == before);
            let values = [r.x, r.weight, r.bias].map(|t| {
                t.unwrap()
                    .to_vec_f32()
                    .ok()
                    .map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())
            });
            (values, untouched)
        })
    };
    let (plain_peak, (plain, _)) = run(Device::Cpu, false, false);
    let (reuse_peak, (reused, _)) = run(Device::Cpu, true, false);
    assert_eq!(reused, plain, "bit-identical");
    assert_eq!(
        plain_peak - reuse_peak,
        (6 * 3 * 25 * 4) as u64,
        "no buffer for grad_x"
    );
    assert_eq!(
        run(Device::META, true, false).0,
        reuse_peak,
        "Meta decides the same way"
    );
    let (shared_peak, (shared, untouched)) = run(Device::Cpu, true, true);
    assert_eq!(shared, plain);
    assert_eq!(shared_peak, plain_peak);
    assert_eq!(untouched, Some(true), "a shared gradient is left as it was");
}

#[test]
fn neuron_backward_reuses_an_unshared_gradient() {
    let (t, n) = (6, 9000);
    for cfg in [NeuronConfig::lif(2.0), NeuronConfig::plif()] {
        let plif = cfg == NeuronConfig::plif();
        let run = |device: Device, reuse: bool, share: bool| {
            tracked(device, || {
                let x = rand(&[t, n], device, MemoryKind::Activation, 4);
                let w = plif.then(|| Tensor::full([1], 0.2, device, MemoryKind::Parameter).unwrap());
                let out = kernels::neuron_forward(&cfg, &x, None, w.as_ref(), true).unwrap();
                let h = out.h_seq.unwrap();
                let g = rand(&[t, n], device, MemoryKind::Gradient, 5);
                let keeper = share.then(|| g.clone());
                let before = keeper.as_ref().and_then(|k| k.to_vec_f32().ok());
                let grad_spikes = if reuse {
                    Operand::Given(g)
                } else {
                    Operand::Lent(&g)
                };
                let r = kernels::neuron_backward(kernels::NeuronBackward {
                    cfg: &cfg,
                    grad_spikes,
                    grad_v_final: None,
                    h_seq: &h,
                    v_init: None,
                    w: w.as_ref(),
                    want_v_init_grad: true,
                    w_acc: None,
                })
                .unwrap();
                let untouched = keeper.map(|k| k.to_vec_f32().ok() == before);
                let bits = |t: Option<Tensor>| {
                    t.and_then(|t| t.to_vec_f32().ok())
                        .map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())
                };
                ((bits(Some(r.x)), bits(r.v_init), bits(r.w)), untouched)
            })
        };
        let (plain_peak, (plain, _)) = run(Device::Cpu, false, false);
        let (reuse_peak, (reused, _)) = run(Device::Cpu, true, false);
        assert_eq!(reused, plain, "bit-identical");
        assert_eq!(
            plain_peak - reuse_peak,
            (t * n * 4) as u64,
            "no buffer for grad_x"
        );
        assert_eq!(run(Device::META, true, false).0, reuse_peak);
        let (shared_peak, (shared, untouched)) = run(Device::Cpu, true, true);
        assert_eq!((shared, shared_peak), (plain, plain_peak));
        assert_eq!(untouched, Some(true));
    }
}
