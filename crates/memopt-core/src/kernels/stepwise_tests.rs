//! The stepwise layer kernels against the dense ones: bit-identical outputs, input gradients
//! and accumulated weight and bias gradients on random shapes; Meta allocating exactly what the
//! CPU does; the one-step buffer as the only extra allocation.

use super::matmul::tests::{events_of, tensor};
use super::step_input::DenseSteps;
use super::*;
use crate::memory::{MemoryAction, MemoryKind};
use crate::{Device, Tensor};
use proptest::prelude::*;

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().into_iter().map(f32::to_bits).collect()
}

/// A conv problem folding `t` time steps of `n` images.
#[derive(Debug, Clone)]
struct ConvCase {
    t: usize,
    n: usize,
    c: usize,
    hw: usize,
    co: usize,
    k: usize,
    p: Conv2dParams,
    bias: bool,
    needs_input: bool,
    seed: u64,
}

impl ConvCase {
    fn x_dims(&self) -> [usize; 4] {
        [self.t * self.n, self.c, self.hw, self.hw]
    }
    fn w_dims(&self) -> [usize; 4] {
        [self.co, self.c / self.p.groups, self.k, self.k]
    }
}

fn conv_cases() -> impl Strategy<Value = ConvCase> {
    (
        (1usize..=4, 1usize..=3, 1usize..=2, 1usize..=3),
        (2usize..=7, 1usize..=3, 1usize..=3),
        (1usize..=2, 0usize..=1),
        (any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |((t, n, groups, cg), (hw, co_g, k), (stride, pad), (bias, needs_input, seed))| ConvCase {
                t,
                n,
                c: groups * cg,
                hw: hw.max(k),
                co: groups * co_g,
                k,
                p: Conv2dParams {
                    stride: [stride; 2],
                    padding: [pad; 2],
                    groups,
                    ..Conv2dParams::default()
                },
                bias,
                needs_input,
                seed,
            },
        )
}

/// One-group conv problems large enough for the implicit GEMM's blocking: inner dimensions
/// `c * k * k` past one packed block (256), output channels past one row panel (6) with a tail,
/// columns past one column block (128) and across images, dilation, and strides whose input
/// gradient is not a convolution.
fn wide_conv_cases() -> impl Strategy<Value = ConvCase> {
    (
        (1usize..=3, 1usize..=3, 1usize..=40, 1usize..=14),
        (3usize..=11, 1usize..=3, 1usize..=2),
        (1usize..=3, 0usize..=2),
        (any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |((t, n, c, co), (hw, k, dil), (stride, pad), (bias, needs_input, seed))| ConvCase {
                t,
                n,
                c,
                hw: hw.max(dil * (k - 1) + 1),
                co,
                k,
                p: Conv2dParams {
                    stride: [stride; 2],
                    padding: [pad; 2],
                    dilation: [dil; 2],
                    groups: 1,
                },
                bias,
                needs_input,
                seed,
            },
        )
}

/// Forward, then backward with accumulators starting from random values, by the dense kernels
/// (`stepwise` false) or the stepwise ones reading `x` through [`DenseSteps`]: the output, the
/// input gradient and the two accumulators.
fn run_conv(c: &ConvCase, stepwise: bool, device: Device) -> [Option<Tensor>; 4] {
    let x = tensor(&c.x_dims(), c.seed, device);
    let w = tensor(&c.w_dims(), c.seed ^ 1, device);
    let b = tensor(&[c.co], c.seed ^ 2, device);
    let bias = c.bias.then_some(&b);
    let y = if stepwise {
        conv2d_stepwise(&DenseSteps(&x), &w, bias, &c.p, c.t).unwrap()
    } else {
        conv2d(&x, &w, bias, &c.p, c.t).unwrap()
    };
    let grad = tensor(y.dims(), c.seed ^ 3, device);
    let wacc = tensor(&c.w_dims(), c.seed ^ 4, device);
    let bacc = tensor(&[c.co], c.seed ^ 5, device);
    let acc = WeightGradAcc {
        weight: Some(&wacc),
        bias: c.bias.then_some(&bacc),
        time_steps: c.t,
    };
    let gx = if stepwise {
        conv2d_backward_stepwise(Conv2dBackwardStepwise {
            grad: &grad,
            x: &DenseSteps(&x),
            w: &w,
            params: &c.p,
            input: c.needs_input,
            acc,
        })
        .unwrap()
    } else {
        conv2d_backward(Conv2dBackward {
            grad: &grad,
            x: &x,
            w: &w,
            has_bias: c.bias,
            params: &c.p,
            needs: GradNeeds {
                input: c.needs_input,
                weight: true,
                bias: c.bias,
            },
            acc: Some(acc),
        })
        .unwrap()
        .x
    };
    [Some(y), gx, Some(wacc), c.bias.then_some(bacc)]
}

/// A linear problem: `[t, rows, k]` inputs, `n` outputs.
#[derive(Debug, Clone)]
struct LinearCase {
    t: usize,
    rows: usize,
    k: usize,
    n: usize,
    bias: bool,
    needs_input: bool,
    seed: u64,
}

fn linear_cases() -> impl Strategy<Value = LinearCase> {
    (
        (1usize..=5, 1usize..=6, 1usize..=40, 1usize..=20),
        (any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(|((t, rows, k, n), (bias, needs_input, seed))| LinearCase {
            t,
            rows,
            k,
            n,
            bias,
            needs_input,
            seed,
        })
}

fn run_linear(c: &LinearCase, stepwise: bool, device: Device) -> [Option<Tensor>; 4] {
    let x = tensor(&[c.t, c.rows, c.k], c.seed, device);
    let w = tensor(&[c.n, c.k], c.seed ^ 1, device);
    let b = tensor(&[c.n], c.seed ^ 2, device);
    let bias = c.bias.then_some(&b);
    let y = if stepwise {
        linear_stepwise(&DenseSteps(&x), &w, bias, c.t).unwrap()
    } else {
        linear(&x, &w, bias, c.t).unwrap()
    };
    let grad = tensor(y.dims(), c.seed ^ 3, device);
    let wacc = tensor(&[c.n, c.k], c.seed ^ 4, device);
    let bacc = tensor(&[c.n], c.seed ^ 5, device);
    let acc = WeightGradAcc {
        weight: Some(&wacc),
        bias: c.bias.then_some(&bacc),
        time_steps: c.t,
    };
    let gx = if stepwise {
        linear_backward_stepwise(LinearBackwardStepwise {
            grad: &grad,
            x: &DenseSteps(&x),
            w: &w,
            input: c.needs_input,
            acc,
        })
        .unwrap()
    } else {
        linear_backward(LinearBackward {
            grad: &grad,
            x: &x,
            w: &w,
            has_bias: c.bias,
            needs: GradNeeds {
                input: c.needs_input,
                weight: true,
                bias: c.bias,
            },
            acc: Some(acc),
        })
        .unwrap()
        .x
    };
    [Some(y), gx, Some(wacc), c.bias.then_some(bacc)]
}

fn assert_same(dense: [Option<Tensor>; 4], stepwise: [Option<Tensor>; 4], what: &str) {
    for (i, (d, s)) in dense.iter().zip(&stepwise).enumerate() {
        let name = ["output", "input gradient", "weight gradient", "bias gradient"][i];
        assert_eq!(d.is_some(), s.is_some(), "{what}: {name}");
        if let (Some(d), Some(s)) = (d, s) {
            assert_eq!(d.dims(), s.dims(), "{what}: {name}");
            assert_eq!(d.kind(), s.kind(), "{what}: {name}");
            assert_eq!(bits(d), bits(s), "{what}: {name} differs");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn conv2d_stepwise_is_bit_identical_to_conv2d(c in conv_cases()) {
        let dense = run_conv(&c, false, Device::Cpu);
        let stepwise = run_conv(&c, true, Device::Cpu);
        assert_same(dense, stepwise, &format!("{c:?}"));
    }

    #[test]
    fn implicit_conv2d_stepwise_is_bit_identical_to_conv2d(c in wide_conv_cases()) {
        let dense = run_conv(&c, false, Device::Cpu);
        let stepwise = run_conv(&c, true, Device::Cpu);
        assert_same(dense, stepwise, &format!("{c:?}"));
    }

    #[test]
    fn linear_stepwise_is_bit_identical_to_linear(c in linear_cases()) {
        let dense = run_linear(&c, false, Device::Cpu);
        let stepwise = run_linear(&c, true, Device::Cpu);
        assert_same(dense, stepwise, &format!("{c:?}"));
    }
}

/// Bytes of the workspace allocations in an event stream, in order.
fn workspace_allocs(events: &[(MemoryAction, u64, MemoryKind)]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.0 == MemoryAction::Alloc && e.2 == MemoryKind::Workspace)
        .map(|e| e.1)
        .collect()
}

#[test]
fn stepwise_kernels_allocate_on_meta_what_they_allocate_on_the_cpu_plus_one_step() {
    // 2 images per step of 3 x 6 x 6 (216 values, a multiple of 8 and not), 5 steps.
    for n in [2, 1] {
        let c = ConvCase {
            t: 5,
            n,
            c: 3,
            hw: 6,
            co: 4,
            k: 3,
            p: Conv2dParams {
                padding: [1, 1],
                ..Conv2dParams::default()
            },
            bias: true,
            needs_input: true,
            seed: 7,
        };
        let events = |stepwise: bool, device: Device| {
            events_of(device, |d| {
                run_conv(&c, stepwise, d);
            })
        };
        let cpu = events(true, Device::Cpu);
        assert_eq!(cpu, events(true, Device::META), "{c:?}");
        // Forward and backward each allocate one step of the input as workspace, on top of
        // what the dense kernels allocate.
        let step = 4 * (n * 3 * 6 * 6) as u64;
        let dense = workspace_allocs(&events(false, Device::Cpu));
        let stepwise = workspace_allocs(&cpu);
        assert_eq!(stepwise.len(), dense.len() + 2, "{stepwise:?} vs {dense:?}");
        let mut extra = stepwise.clone();
        for d in &dense {
            let i = extra
                .iter()
                .position(|e| e == d)
                .expect("dense workspace also allocated");
            extra.remove(i);
        }
        assert_eq!(extra, vec![step, step]);
    }
    let l = LinearCase {
        t: 3,
        rows: 2,
        k: 5,
        n: 4,
        bias: true,
        needs_input: true,
        seed: 3,
    };
    let events = |stepwise: bool, device: Device| {
        events_of(device, |d| {
            run_linear(&l, stepwise, d);
        })
    };
    let cpu = events(true, Device::Cpu);
    assert_eq!(cpu, events(true, Device::META));
    assert!(workspace_allocs(&events(false, Device::Cpu)).is_empty());
    assert_eq!(workspace_allocs(&cpu), vec![4 * 2 * 5, 4 * 2 * 5]);
}

#[test]
fn stepwise_errors_name_the_problem() {
    let x = tensor(&[4, 3, 5, 5], 1, Device::Cpu);
    let w = tensor(&[2, 3, 3, 3], 2, Device::Cpu);
    let p = Conv2dParams::default();
    let e = conv2d_stepwise(&DenseSteps(&x), &w, None, &p, 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("time_steps = 3"), "{e}");
    let w_meta = tensor(&[2, 3, 3, 3], 2, Device::META);
    let e = conv2d_stepwise(&DenseSteps(&x), &w_meta, None, &p, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d_stepwise"), "{e}");
    let wl = tensor(&[2, 4], 2, Device::Cpu);
    let e = linear_stepwise(&DenseSteps(&x), &wl, None, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("in_features"), "{e}");
}
