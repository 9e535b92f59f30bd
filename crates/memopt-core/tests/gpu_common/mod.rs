//! Shared by the GPU kernel tests: the GPU gate (skip with a reason, or fail under
//! MEMOPT_REQUIRE_GPU=1), random inputs, CPU/GPU twins and the comparisons the issue asks for
//! (bit-identical, or within a relative tolerance).
#![allow(dead_code)]

pub use memopt_core::cuda::gpu_or_skip;
use memopt_core::{Device, MemoryKind, Tensor};

/// The GPU every test uses.
pub const GPU: Device = Device::Cuda(0);

/// `n` pseudo-random values in `[-scale, scale)` from `seed` (splitmix64).
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Spikes (0/1) with about one in `1 << k` ones.
pub fn spikes(n: usize, seed: u64, k: u32) -> Vec<f32> {
    values(n, seed, 1.0)
        .iter()
        .map(|v| ((v.to_bits() >> 3) % (1 << k) == 0) as u32 as f32)
        .collect()
}

/// The same values on the CPU and on the GPU, as a VIEW: the tensor is rows `1..=dims[0]` of
/// one with an extra leading row, so every kernel sees a non-zero storage offset.
pub fn twin(data: &[f32], dims: &[usize]) -> (Tensor, Tensor) {
    let row: usize = dims[1..].iter().product();
    let mut padded = values(row, 0xBAD, 9.0);
    padded.extend_from_slice(data);
    let mut pdims = dims.to_vec();
    pdims[0] += 1;
    let on = |device| {
        Tensor::from_vec(padded.clone(), &pdims[..], device, MemoryKind::Input)
            .unwrap()
            .narrow0(1, dims[0])
            .unwrap()
    };
    (on(Device::Cpu), on(GPU))
}

/// A tensor on the CPU and its copy on the GPU (no view).
pub fn pair<T: memopt_core::Element + Clone>(data: Vec<T>, dims: &[usize]) -> (Tensor, Tensor) {
    let cpu = Tensor::from_vec(data, dims, Device::Cpu, MemoryKind::Input).unwrap();
    let gpu = cpu.to_device(GPU).unwrap();
    (cpu, gpu)
}

/// Asserts the GPU result has the CPU result's shape, spike flag and exact bits.
pub fn assert_identical(what: &str, cpu: &Tensor, gpu: &Tensor) {
    assert_eq!(gpu.device(), GPU, "{what}: result not on the GPU");
    assert_eq!(cpu.dims(), gpu.dims(), "{what}: shapes");
    assert_eq!(cpu.is_spike(), gpu.is_spike(), "{what}: spike flags");
    let (c, g) = (cpu.to_vec_f32().unwrap(), gpu.to_vec_f32().unwrap());
    if let Some(i) =
        (0..c.len()).find(|&i| c[i].to_bits() != g[i].to_bits() && !(c[i].is_nan() && g[i].is_nan()))
    {
        panic!(
            "{what}: element {i} of {}: cpu {} gpu {} (bit-identical expected)",
            c.len(),
            c[i],
            g[i]
        );
    }
}

/// Asserts every element is within `rel` relative error of the CPU's (absolute below `rel`
/// times the largest CPU magnitude, for values near zero).
pub fn assert_close(what: &str, cpu: &Tensor, gpu: &Tensor, rel: f64) {
    assert_eq!(gpu.device(), GPU, "{what}: result not on the GPU");
    assert_eq!(cpu.dims(), gpu.dims(), "{what}: shapes");
    let (c, g) = (cpu.to_vec_f32().unwrap(), gpu.to_vec_f32().unwrap());
    let floor = c.iter().fold(0f64, |m, v| m.max(v.abs() as f64)) * rel;
    for i in 0..c.len() {
        let (a, b) = (c[i] as f64, g[i] as f64);
        let err = (a - b).abs();
        assert!(
            err <= rel * a.abs() || err <= floor,
            "{what}: element {i} of {}: cpu {a} gpu {b} (relative tolerance {rel})",
            c.len()
        );
    }
}

/// Odd sizes around the CPU's block boundaries (8-lane chunks, 16384-value blocks).
pub const ODD_SIZES: [usize; 8] = [1, 7, 9, 255, 1023, 16_383, 16_385, 100_003];
