//! Outputs nobody reads are not materialised: BatchNorm and the neurons have a forward for
//! backward only, which gives bit for bit what their backward reads and allocates exactly the
//! output's bytes less, on Meta as on the CPU; the stand-in they return has the output's
//! shape but no elements, and reading it is an error everywhere. `add` writes the sum over a
//! handed-over operand nothing else holds.

use memopt_core::kernels::{self, BatchNormTrain, Conv2dParams, NeuronConfig, RunningStats};
use memopt_core::{CoreError, DType, Device, MemoryKind, MemoryTracker, Philox, Tensor};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n).map(|_| rng.next_uniform() * 4.0 - 2.0).collect()
}

fn tensor(dims: &[usize], seed: u64, device: Device) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_vec(values(n, seed), dims, device, MemoryKind::Activation).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().into_iter().map(f32::to_bits).collect()
}

/// Runs `f` on a fresh tracker for `device`; returns its result and the tracker's peak bytes
/// above what was held when `f` started.
fn measured<T>(device: Device, f: impl FnOnce() -> T) -> (T, u64) {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let out = f();
    (out, tracker.peak_bytes())
}

fn devices() -> [Device; 2] {
    [Device::Cpu, Device::META]
}

#[test]
fn batch_norm_for_backward_gives_the_statistics_bit_for_bit_without_the_output() {
    let dims = [6, 3, 5, 4];
    let y_bytes = (dims.iter().product::<usize>() * 4) as u64;
    let mut peaks = Vec::new();
    for device in devices() {
        let run = |for_backward: bool| {
            measured(device, || {
                let x = tensor(&dims, 1, device);
                let w = tensor(&[3], 2, device);
                let b = tensor(&[3], 3, device);
                let (rm, rv) = (tensor(&[3], 4, device), tensor(&[3], 5, device));
                let args = BatchNormTrain {
                    x: &x,
                    weight: Some(&w),
                    bias: Some(&b),
                    running: Some(RunningStats { mean: &rm, var: &rv }),
                    momentum: 0.1,
                    eps: 1e-5,
                };
                let out = if for_backward {
                    kernels::batch_norm_train_for_backward(args)
                } else {
                    kernels::batch_norm_train(args)
                }
                .unwrap();
                (out, rm, rv)
            })
        };
        let ((full, rm_full, rv_full), peak_full) = run(false);
        let ((stats, rm_stats, rv_stats), peak_stats) = run(true);
        assert_eq!(
            peak_full - peak_stats,
            y_bytes,
            "{device}: exactly the output's bytes less"
        );
        assert!(full.y.is_materialised() && !stats.y.is_materialised());
        assert_eq!(stats.y.shape(), full.y.shape());
        if device == Device::Cpu {
            for (a, b) in [
                (&full.save_mean, &stats.save_mean),
                (&full.save_invstd, &stats.save_invstd),
                (&rm_full, &rm_stats),
                (&rv_full, &rv_stats),
            ] {
                assert_eq!(bits(a), bits(b), "statistics and running update bit for bit");
            }
        }
        peaks.push((peak_full, peak_stats));
    }
    assert_eq!(peaks[0], peaks[1], "Meta allocates what the CPU does");
}

#[test]
fn neuron_for_backward_keeps_the_potentials_and_state_bit_for_bit_without_spikes() {
    let dims = [4, 3, 50];
    let spike_bytes = (dims.iter().product::<usize>() * 4) as u64;
    let cfg = NeuronConfig::lif(2.0);
    let mut peaks = Vec::new();
    for device in devices() {
        for handed_over in [false, true] {
            let run = |for_backward: bool| {
                measured(device, || {
                    let x = tensor(&dims, 7, device);
                    let v = tensor(&dims[1..], 8, device);
                    let out = match (for_backward, handed_over) {
                        (false, false) => kernels::neuron_forward(&cfg, &x, Some(&v), None, true),
                        (false, true) => kernels::neuron_forward(&cfg, x, Some(&v), None, true),
                        (true, false) => kernels::neuron_forward_for_backward(&cfg, &x, Some(&v), None),
                        (true, true) => kernels::neuron_forward_for_backward(&cfg, x, Some(&v), None),
                    };
                    out.unwrap()
                })
            };
            let (full, peak_full) = run(false);
            let (lean, peak_lean) = run(true);
            assert_eq!(
                peak_full - peak_lean,
                spike_bytes,
                "{device}: exactly the spikes' bytes less"
            );
            assert!(!lean.spikes.is_materialised() && lean.spikes.is_spike());
            assert_eq!(lean.spikes.shape(), full.spikes.shape());
            let (h_full, h_lean) = (full.h_seq.unwrap(), lean.h_seq.unwrap());
            if device == Device::Cpu {
                assert_eq!(bits(&h_full), bits(&h_lean), "potentials bit for bit");
                assert_eq!(
                    bits(&full.v_final),
                    bits(&lean.v_final),
                    "final state bit for bit"
                );
            }
            peaks.push((peak_full, peak_lean));
        }
    }
    assert_eq!(peaks[..2], peaks[2..], "Meta allocates what the CPU does");
}

#[test]
fn an_unmaterialised_tensor_keeps_its_shape_and_refuses_every_read() {
    for device in devices() {
        let (t, peak) = measured(device, || {
            Tensor::unmaterialised([4, 2, 3], DType::F32, device).unwrap()
        });
        assert_eq!(peak, 0, "{device}: a stand-in holds no bytes");
        assert!(!t.is_materialised());
        let view = t.reshape([8, 3]).unwrap().narrow0(2, 4).unwrap();
        assert_eq!(view.dims(), [4, 3]);
        assert!(!view.is_materialised(), "views of a stand-in are stand-ins");
        let other = Tensor::zeros([8, 3], DType::F32, device, MemoryKind::Activation).unwrap();
        for e in [
            kernels::relu(&view).unwrap_err(),
            kernels::assign(&other.narrow0(0, 4).unwrap(), &view).unwrap_err(),
            kernels::add(&t, &t).unwrap_err(),
        ] {
            assert!(
                matches!(e, CoreError::Unmaterialised { .. }),
                "{device}: reading a stand-in is refused, got {e}"
            );
            assert!(e.to_string().contains("never materialised"), "{e}");
        }
        if device == Device::Cpu {
            assert!(matches!(
                t.to_vec_f32().unwrap_err(),
                CoreError::Unmaterialised { .. }
            ));
        }
    }
}

#[test]
fn conv2d_output_shape_is_the_shape_conv2d_gives_and_validates_alike() {
    let p = Conv2dParams {
        stride: [2, 1],
        padding: [1, 0],
        ..Conv2dParams::default()
    };
    let x = tensor(&[2, 3, 9, 7], 1, Device::Cpu);
    let w = tensor(&[5, 3, 3, 2], 2, Device::Cpu);
    let b = tensor(&[5], 3, Device::Cpu);
    let y = kernels::conv2d(&x, &w, Some(&b), &p, 1).unwrap();
    assert_eq!(
        &kernels::conv2d_output_shape(&x, &w, Some(&b), &p).unwrap(),
        y.shape()
    );
    let bad_bias = tensor(&[4], 3, Device::Cpu);
    assert_eq!(
        kernels::conv2d_output_shape(&x, &w, Some(&bad_bias), &p)
            .unwrap_err()
            .to_string(),
        kernels::conv2d(&x, &w, Some(&bad_bias), &p, 1)
            .unwrap_err()
            .to_string()
    );
}

#[test]
fn add_writes_over_a_handed_over_operand_nothing_else_holds() {
    let dims = [3, 40];
    let bytes = (dims.iter().product::<usize>() * 4) as u64;
    let mut peaks = Vec::new();
    for device in devices() {
        // (hand over a, hand over b, keep a second handle of both): the sum is always a + b.
        for (give_a, give_b, shared) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (true, true, true),
        ] {
            let (sum, peak) = measured(device, || {
                let a = tensor(&dims, 11, device);
                let b = tensor(&dims, 12, device).with_spike_flag(false);
                let keep = shared.then(|| (a.clone(), b.clone()));
                let sum = match (give_a, give_b) {
                    (true, true) => kernels::add(a, b),
                    (true, false) => kernels::add(a, &b),
                    (false, true) => kernels::add(&a, b),
                    (false, false) => kernels::add(&a, &b),
                }
                .unwrap();
                drop(keep);
                sum
            });
            let reused = (give_a || give_b) && !shared;
            assert_eq!(peak, if reused { 2 * bytes } else { 3 * bytes }, "{device}");
            assert!(!sum.is_spike());
            if device == Device::Cpu {
                let (a, b) = (values(120, 11), values(120, 12));
                let expected: Vec<u32> = a.iter().zip(&b).map(|(x, y)| (x + y).to_bits()).collect();
                assert_eq!(bits(&sum), expected, "a + b bit for bit");
            }
            peaks.push(peak);
        }
    }
    assert_eq!(peaks[..4], peaks[4..], "Meta allocates what the CPU does");
}
