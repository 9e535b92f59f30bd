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
    // 4x4 outputs (16 columns per image) over 512 images: the CPU groups 64 images per chunk,
    // the CUDA target 256.
    let (b, c, co, hw) = (512usize, 2usize, 3usize, 4usize);
    let p = Conv2dParams {
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
    };
    let mut peaks = Vec::new();
    for target in TARGETS {
        let device = Device::Meta(target);
        let (x, w) = (meta(&[b, c, hw, hw], device), meta(&[co, c, 3, 3], device));
        let peak = extra_peak(device, |_| {
            kernels::conv2d(&x, &w, None, &p, 1).unwrap();
        });
        let pixels = hw * hw;
        let images = target.conv_chunk_columns().div_ceil(pixels).clamp(1, b);
        let col = c * 9 * images * pixels;
        let stage = if images > 1 { co * images * pixels } else { 0 };
        let out = b * co * pixels;
        let want = 4 * (out + col + stage) + target.gemm_workspace_bytes();
        assert_eq!(peak, want as u64, "{target}");
        peaks.push(peak);
    }
    assert_ne!(peaks[0], peaks[1], "the targets' rules differ for this shape");
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
