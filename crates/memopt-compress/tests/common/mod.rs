//! Helpers shared by the integration tests.
#![allow(dead_code)]

use half::{bf16, f16};
use memopt_core::memory::{MemoryAction, MemoryEvent, MemorySubscriber};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Tensor};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

/// Every compressor of binary data: all but spike counts, which take pooled spikes only (see
/// `tests/spike_counts.rs`).
pub fn binary_data_kinds() -> impl Iterator<Item = memopt_compress::CompressorKind> {
    memopt_compress::CompressorKind::ALL
        .into_iter()
        .filter(|&k| k != memopt_compress::CompressorKind::SpikeCounts)
}

/// One tracker event as the tests compare it.
pub type Ev = (MemoryAction, u64, MemoryKind);

#[derive(Default)]
struct Recorder(Mutex<Vec<Ev>>);

impl MemorySubscriber for Recorder {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push((e.action, e.bytes, e.kind));
    }
}

/// Runs `f` with a fresh tracker for `device` installed and returns its result and the events.
pub fn record<R>(device: Device, f: impl FnOnce() -> R) -> (R, Vec<Ev>) {
    let tracker = MemoryTracker::new(device);
    let _guard = MemoryTracker::install(tracker.clone());
    let rec = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(rec.clone());
    let r = f();
    let events = rec.0.lock().unwrap().clone();
    (r, events)
}

/// A tensor of `dtype` holding `values` (exactly representable) on `device`.
pub fn tensor(values: &[f32], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let k = MemoryKind::Activation;
    match dtype {
        DType::F32 => Tensor::from_vec(values.to_vec(), shape, device, k),
        DType::F16 => Tensor::from_vec(
            values.iter().map(|&v| f16::from_f32(v)).collect(),
            shape,
            device,
            k,
        ),
        DType::BF16 => Tensor::from_vec(
            values.iter().map(|&v| bf16::from_f32(v)).collect(),
            shape,
            device,
            k,
        ),
        d => panic!("no test tensors of {d}"),
    }
    .unwrap()
}

/// The raw bits of a float tensor's values (u32 for f32, u16 widened for f16/bf16).
pub fn bits(t: &Tensor) -> Vec<u32> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u32)
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u32)
            .collect(),
        d => panic!("no bits of {d}"),
    }
}

/// Shapes of rank 0 to 5 with small dimensions, zero included (empty tensors).
pub fn shapes() -> impl Strategy<Value = Vec<usize>> {
    (0usize..=5).prop_flat_map(|rank| {
        let max: usize = if rank >= 4 { 4 } else { 9 };
        proptest::collection::vec(prop_oneof![1 => Just(0usize), 12 => 1..=max], rank)
    })
}

/// One of the float dtypes.
pub fn float_dtypes() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]
}

/// A shape, a dtype and binary values for it (density of ones anywhere in 0..=1).
pub fn binary_case() -> impl Strategy<Value = (Vec<usize>, DType, Vec<f32>)> {
    (shapes(), float_dtypes(), 0u32..=100).prop_flat_map(|(shape, dtype, density)| {
        let n: usize = shape.iter().product();
        let values = proptest::collection::vec(0u32..100, n).prop_map(move |v| {
            v.iter()
                .map(|&r| if r < density { 1.0 } else { 0.0 })
                .collect::<Vec<f32>>()
        });
        (Just(shape), Just(dtype), values)
    })
}
