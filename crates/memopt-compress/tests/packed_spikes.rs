//! PackedSpikes: spans unpacked from any bit (byte-aligned or not) equal the same values of the
//! whole decompressed tensor; views (reshape, time slices) share the payload; layers reading
//! packed spikes one time step at a time give bit-identical results to the dense layers; Meta
//! records exactly what the CPU records.

mod common;

use common::{bits, record, tensor};
use memopt_compress::{BitSpike, Compressor, PackedSpikes};
use memopt_core::backend::Init;
use memopt_core::kernels::{self, Conv2dParams, StepInput};
use memopt_core::{DType, Device, KernelBuffer, MemoryKind, Tensor};
use proptest::prelude::*;

/// Spikes from a seed: value i is 1 where a hash of (seed, i) is odd.
fn spikes(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((h >> 31) & 1) as f32
        })
        .collect()
}

fn span(p: &PackedSpikes, first: usize, len: usize) -> Vec<f32> {
    let mut buf = KernelBuffer::<f32>::workspace("test", Device::Cpu, len, Init::Overwritten).unwrap();
    p.write_span("test", first, &mut buf).unwrap();
    buf.into_tensor([len]).unwrap().to_vec_f32().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn spans_from_any_bit_equal_the_decompressed_values(
        (t, inner) in (1usize..=6, 1usize..=70),
        seed in any::<u64>(),
        (a, b) in (0usize..=6, 0usize..=6),
    ) {
        let values = spikes(t * inner, seed);
        let x = tensor(&values, &[t, inner], DType::F32, Device::Cpu).with_spike_flag(true);
        let p = PackedSpikes::pack(&x).unwrap();
        let whole = BitSpike.decompress(&BitSpike.compress(&x).unwrap()).unwrap();
        prop_assert_eq!(bits(&p.unpack().unwrap()), bits(&whole));
        // Every time step, and a time slice's steps (bit offsets not multiples of 8).
        for s in 0..t {
            prop_assert_eq!(span(&p, s * inner, inner), values[s * inner..][..inner].to_vec());
        }
        let (start, len) = (a.min(t - 1), 1 + b.min(t - 1 - a.min(t - 1)));
        let slice = p.narrow0(start, len).unwrap();
        prop_assert_eq!(slice.payload().storage().allocation().id(), p.payload().storage().allocation().id());
        prop_assert_eq!(slice.unpack().unwrap().to_vec_f32().unwrap(), values[start * inner..][..len * inner].to_vec());
        let flat = slice.reshape([len * inner]).unwrap();
        prop_assert_eq!(flat.dims(), &[len * inner]);
        prop_assert_eq!(flat.unpack().unwrap().to_vec_f32().unwrap(), values[start * inner..][..len * inner].to_vec());
        // Moved (as an offload moves it), a slice takes only the bytes that hold its bits and
        // keeps its values.
        let moved = slice.to_device(Device::Cpu, MemoryKind::Offloaded).unwrap();
        let first = start * inner;
        prop_assert_eq!(moved.payload().view_bytes(), ((first + len * inner).div_ceil(8) - first / 8) as u64);
        prop_assert_eq!(moved.unpack().unwrap().to_vec_f32().unwrap(), values[first..][..len * inner].to_vec());
    }
}

/// Values in [-1, 1) with full mantissas from a seed (weights, gradients, accumulators).
fn floats(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A conv layer reading `t` time steps of `n` spike images, dense or packed.
#[derive(Debug, Clone)]
struct PackedConvCase {
    t: usize,
    n: usize,
    c: usize,
    hw: usize,
    co: usize,
    k: usize,
    params: Conv2dParams,
    needs_input: bool,
    seed: u64,
}

fn packed_conv_cases() -> impl Strategy<Value = PackedConvCase> {
    (
        (1usize..=4, 1usize..=3, 1usize..=36, 1usize..=13),
        (2usize..=10, 1usize..=3, 1usize..=2, 1usize..=2),
        (1usize..=3, 0usize..=2, any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |((t, n, c, co), (hw, k, dil, groups), (stride, pad, needs_input, seed))| {
                // Two groups only where both channel counts split.
                let groups = if c % 2 == 0 && co % 2 == 0 { groups } else { 1 };
                PackedConvCase {
                    t,
                    n,
                    c,
                    hw: hw.max(dil * (k - 1) + 1),
                    co,
                    k,
                    params: Conv2dParams {
                        stride: [stride; 2],
                        padding: [pad; 2],
                        dilation: [dil; 2],
                        groups,
                    },
                    needs_input,
                    seed,
                }
            },
        )
}

/// The output, input gradient and weight and bias accumulators (started from random values) of
/// the case's layer on dense spikes (`packed` false) or the same spikes bit-packed.
fn run_packed_conv(c: &PackedConvCase, packed: bool) -> Vec<Vec<u32>> {
    let f = |dims: &[usize], seed: u64| {
        let n = dims.iter().product();
        tensor(&floats(n, seed), dims, DType::F32, Device::Cpu)
    };
    let x_dims = [c.t * c.n, c.c, c.hw, c.hw];
    let w_dims = [c.co, c.c / c.params.groups, c.k, c.k];
    let x = tensor(
        &spikes(x_dims.iter().product(), c.seed),
        &x_dims,
        DType::F32,
        Device::Cpu,
    )
    .with_spike_flag(true);
    let p = PackedSpikes::pack(&x).unwrap();
    let (w, b) = (f(&w_dims, c.seed ^ 1), f(&[c.co], c.seed ^ 2));
    let y = if packed {
        kernels::conv2d_stepwise(&p, &w, Some(&b), &c.params, c.t).unwrap()
    } else {
        kernels::conv2d(&x, &w, Some(&b), &c.params, c.t).unwrap()
    };
    let grad = f(y.dims(), c.seed ^ 3);
    let (wa, ba) = (f(&w_dims, c.seed ^ 4), f(&[c.co], c.seed ^ 5));
    let acc = kernels::WeightGradAcc {
        weight: Some(&wa),
        bias: Some(&ba),
        time_steps: c.t,
    };
    let gx = if packed {
        kernels::conv2d_backward_stepwise(kernels::Conv2dBackwardStepwise {
            grad: &grad,
            x: &p,
            w: &w,
            params: &c.params,
            input: c.needs_input,
            acc,
        })
        .unwrap()
    } else {
        kernels::conv2d_backward(kernels::Conv2dBackward {
            grad: &grad,
            x: &x,
            w: &w,
            has_bias: true,
            params: &c.params,
            needs: kernels::GradNeeds {
                input: c.needs_input,
                ..kernels::GradNeeds::ALL
            },
            acc: Some(acc),
        })
        .unwrap()
        .x
    };
    let mut out = vec![bits(&y), bits(&wa), bits(&ba)];
    out.extend(gx.as_ref().map(bits));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// A plan storing a conv layer's input spikes packed gives the bits of storing them as f32:
    /// the output, the input gradient and the accumulated weight and bias gradients, over
    /// strides, padding, dilation, groups, channels (inner dimensions past one packed block of
    /// the implicit GEMM) and time steps.
    #[test]
    fn packed_conv_is_bit_identical_to_the_dense_conv(c in packed_conv_cases()) {
        let dense = run_packed_conv(&c, false);
        let packed = run_packed_conv(&c, true);
        let names = ["output", "weight gradient", "bias gradient", "input gradient"];
        prop_assert_eq!(dense.len(), packed.len());
        for (i, (d, p)) in dense.iter().zip(&packed).enumerate() {
            prop_assert!(d == p, "{} differs: {:?}", names[i], c);
        }
    }
}

#[test]
fn packed_conv_and_linear_match_the_dense_layers_bit_for_bit() {
    // T = 3 steps of 3 images [2, 5, 5] (150 values per step: steps start inside a byte).
    let (t, n) = (3, 3);
    let values = spikes(t * n * 2 * 5 * 5, 11);
    let x = tensor(&values, &[t * n, 2, 5, 5], DType::F32, Device::Cpu).with_spike_flag(true);
    let p = PackedSpikes::pack(&x).unwrap();
    let w = tensor(&spikes(4 * 2 * 3 * 3, 5), &[4, 2, 3, 3], DType::F32, Device::Cpu);
    let w = kernels::scale(&w, 0.37).unwrap();
    let b = kernels::scale(&tensor(&spikes(4, 6), &[4], DType::F32, Device::Cpu), -1.3).unwrap();
    let params = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let dense = kernels::conv2d(&x, &w, Some(&b), &params, t).unwrap();
    let packed = kernels::conv2d_stepwise(&p, &w, Some(&b), &params, t).unwrap();
    assert_eq!(bits(&dense), bits(&packed));
    let grad = kernels::scale(&dense, 0.5).unwrap();
    let accs = |d: bool| -> (Tensor, Tensor, Option<Tensor>) {
        let wa = Tensor::zeros(w.shape().clone(), DType::F32, Device::Cpu, MemoryKind::Gradient).unwrap();
        let ba = Tensor::zeros([4], DType::F32, Device::Cpu, MemoryKind::Gradient).unwrap();
        let acc = kernels::WeightGradAcc {
            weight: Some(&wa),
            bias: Some(&ba),
            time_steps: t,
        };
        let gx = if d {
            kernels::conv2d_backward(kernels::Conv2dBackward {
                grad: &grad,
                x: &x,
                w: &w,
                has_bias: true,
                params: &params,
                needs: kernels::GradNeeds::ALL,
                acc: Some(acc),
            })
            .unwrap()
            .x
        } else {
            kernels::conv2d_backward_stepwise(kernels::Conv2dBackwardStepwise {
                grad: &grad,
                x: &p,
                w: &w,
                params: &params,
                input: true,
                acc,
            })
            .unwrap()
        };
        (wa, ba, gx)
    };
    let (dw, db, dx) = accs(true);
    let (pw, pb, px) = accs(false);
    assert_eq!(bits(&dw), bits(&pw));
    assert_eq!(bits(&db), bits(&pb));
    assert_eq!(bits(&dx.unwrap()), bits(&px.unwrap()));

    // Linear on [T, N, 50] rows.
    let xl = x.reshape([t, n, 50]).unwrap();
    let pl = p.reshape([t, n, 50]).unwrap();
    let wl = kernels::scale(
        &tensor(&spikes(7 * 50, 9), &[7, 50], DType::F32, Device::Cpu),
        0.1,
    )
    .unwrap();
    let dense = kernels::linear(&xl, &wl, None, t).unwrap();
    let packed = kernels::linear_stepwise(&pl, &wl, None, t).unwrap();
    assert_eq!(bits(&dense), bits(&packed));
}

#[test]
fn meta_records_what_the_cpu_records() {
    let run = |device: Device| {
        record(device, || {
            let x = tensor(&spikes(4 * 37, 3), &[4, 37], DType::F32, device).with_spike_flag(true);
            let p = PackedSpikes::pack(&x).unwrap();
            drop(x);
            let y = p.narrow0(1, 2).unwrap().unpack().unwrap();
            assert_eq!(
                (y.dims(), y.kind(), y.is_spike()),
                (&[2, 37][..], MemoryKind::Activation, true)
            );
            let w = tensor(&spikes(5 * 37, 4), &[5, 37], DType::F32, device);
            kernels::linear_stepwise(&p, &w, None, 4).unwrap();
        })
        .1
    };
    let cpu = run(Device::Cpu);
    assert_eq!(cpu, run(Device::META));
    // The payload is 4 * 37 bits = 19 bytes, kind packed.
    assert!(
        cpu.iter().any(|e| e.1 == 19 && e.2 == MemoryKind::Packed),
        "{cpu:?}"
    );
}

#[test]
fn misuse_is_an_error_naming_the_problem() {
    let x = tensor(&[0.0, 1.0, 2.0], &[3], DType::F32, Device::Cpu);
    let e = PackedSpikes::pack(&x).unwrap_err().to_string();
    assert!(e.contains("not binary"), "{e}");
    let h = tensor(&[0.0, 1.0], &[2], DType::F16, Device::Cpu);
    let e = PackedSpikes::pack(&h).unwrap_err().to_string();
    assert!(e.contains("f32"), "{e}");
    let p = PackedSpikes::pack(&tensor(&[1.0; 6], &[3, 2], DType::F32, Device::Cpu)).unwrap();
    let e = p.reshape([4]).unwrap_err().to_string();
    assert!(e.contains("6 elements"), "{e}");
    let e = p.narrow0(2, 2).unwrap_err().to_string();
    assert!(e.contains("outside dimension 0"), "{e}");
    let mut buf = KernelBuffer::<f32>::workspace("test", Device::Cpu, 4, Init::Overwritten).unwrap();
    let e = p.write_span("test", 3, &mut buf).unwrap_err().to_string();
    assert!(e.contains("values 3..7"), "{e}");
}
