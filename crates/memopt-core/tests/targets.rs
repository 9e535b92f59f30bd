//! Meta reproduces the allocations of the target it carries: the CPU's by default, the CUDA
//! backend's workspace rules for `Meta(Target::Cuda)`. Each expected figure below is derived
//! from the target's documented rule (`Target::*`), so the test checks that ops ask the
//! target, not that a constant has a value.

use memopt_core::kernels::{self, Conv2dParams};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Target, Tensor};

const TARGETS: [Target; 2] = [Target::Cpu, Target::Cuda];

/// The peak of `f` above what existed before it, on `device`, in bytes.
fn extra_peak(device: Device, f: impl FnOnce(Device)) -> u64 {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let before = tracker.current_bytes();
    tracker.reset_peak();
    f(device);
    tracker.peak_bytes() - before
}

fn meta(dims: &[usize], device: Device) -> Tensor {
    Tensor::zeros(dims, DType::F32, device, MemoryKind::Input).unwrap()
}

#[test]
fn linear_adds_the_targets_gemm_workspace() {
    let (m, k, n) = (6usize, 5usize, 3usize);
    for target in TARGETS {
        let device = Device::Meta(target);
        let (x, w) = (meta(&[m, k], device), meta(&[n, k], device));
        let peak = extra_peak(device, |_| {
            kernels::linear(&x, &w, None, 1).unwrap();
        });
        let out = (m * n * 4) as u64;
        assert_eq!(peak, out + target.gemm_workspace_bytes() as u64, "{target}");
    }
}

#[test]
fn conv_im2col_chunks_follow_the_target() {
    // 4x4 outputs (16 columns per image) over 512 images. The CUDA target groups 256 images
    // per im2col chunk; the CPU runs one-group convolutions as implicit GEMMs (no workspace)
    // and grouped ones in chunks of 64 images.
    let (b, c, co, hw) = (512usize, 2usize, 4usize, 4usize);
    for groups in [1, 2] {
        let p = Conv2dParams {
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups,
        };
        let mut peaks = Vec::new();
        for target in TARGETS {
            let device = Device::Meta(target);
            let (x, w) = (
                meta(&[b, c, hw, hw], device),
                meta(&[co, c / groups, 3, 3], device),
            );
            let peak = extra_peak(device, |_| {
                kernels::conv2d(&x, &w, None, &p, 1).unwrap();
            });
            let pixels = hw * hw;
            let out = b * co * pixels;
            let (col, stage) = if target.conv_implicit_gemm() && groups == 1 {
                (0, 0)
            } else {
                let images = target.conv_chunk_columns().div_ceil(pixels).clamp(1, b);
                let stage = if images > 1 { co * images * pixels } else { 0 };
                (c * 9 * images * pixels, stage)
            };
            let want = 4 * (out + col + stage) + target.gemm_workspace_bytes();
            assert_eq!(peak, want as u64, "{target}, {groups} groups");
            peaks.push(peak);
        }
        assert_ne!(peaks[0], peaks[1], "the targets' rules differ for this shape");
    }
}

#[test]
fn conv_input_gradients_flip_the_weights_on_the_cpu() {
    // The CPU's implicit input gradient of a stride-1 convolution holds the flipped weights;
    // CUDA's runs im2col chunks.
    let (b, c, co, hw) = (4usize, 3usize, 5usize, 6usize);
    let p = Conv2dParams {
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
    };
    for target in TARGETS {
        let device = Device::Meta(target);
        let (x, w) = (meta(&[b, c, hw, hw], device), meta(&[co, c, 3, 3], device));
        let grad = meta(&[b, co, hw, hw], device);
        let peak = extra_peak(device, |_| {
            kernels::conv2d_backward(kernels::Conv2dBackward {
                grad: &grad,
                x: &x,
                w: &w,
                has_bias: false,
                params: &p,
                needs: kernels::GradNeeds {
                    input: true,
                    weight: false,
                    bias: false,
                },
                acc: None,
            })
            .unwrap();
        });
        let pixels = hw * hw;
        let workspace = if target.conv_implicit_gemm() {
            co * c * 9
        } else {
            let images = target.conv_chunk_columns().div_ceil(pixels).clamp(1, b);
            c * 9 * images * pixels + if images > 1 { co * images * pixels } else { 0 }
        };
        let want = 4 * (b * c * pixels + workspace) + target.gemm_workspace_bytes();
        assert_eq!(peak, want as u64, "{target}");
    }
}

#[test]
fn blocked_sums_use_the_targets_block() {
    let n = 100_003usize;
    for target in TARGETS {
        let device = Device::Meta(target);
        let x = meta(&[n], device);
        let peak = extra_peak(device, |_| {
            kernels::sum_all(&x).unwrap();
        });
        let partials = n.div_ceil(target.sum_block());
        assert_eq!(peak, (4 + 8 * partials) as u64, "{target}");
    }
}

#[test]
fn meta_for_the_cpu_is_the_default_and_allocates_as_the_cpu() {
    assert_eq!(Device::META, Device::Meta(Target::Cpu));
    assert_eq!(Device::Cpu.meta(), Device::META);
    let n = 100_003usize;
    let cpu = extra_peak(Device::Cpu, |d| {
        let x = Tensor::zeros([n], DType::F32, d, MemoryKind::Input).unwrap();
        kernels::sum_all(&x).unwrap();
    });
    let meta = extra_peak(Device::META, |d| {
        let x = Tensor::zeros([n], DType::F32, d, MemoryKind::Input).unwrap();
        kernels::sum_all(&x).unwrap();
    });
    assert_eq!(cpu, meta);
}
