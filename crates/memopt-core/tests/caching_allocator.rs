//! The CPU's caching allocator behind tensors: blocks are reused, recycled blocks are zeroed
//! before a zero-initialised tensor sees them, and a buffer keeps its block even when moved out
//! of its storage (no two live buffers ever share bytes).

use memopt_core::storage::StorageData;
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Tensor};

#[test]
fn a_recycled_block_is_zeroed_for_a_zero_tensor() {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let dirty = Tensor::full([1000], 7.0, Device::Cpu, MemoryKind::Activation).unwrap();
    let reserved = tracker.reserved_bytes();
    drop(dirty);
    let clean = Tensor::zeros([1000], DType::F32, Device::Cpu, MemoryKind::Activation).unwrap();
    assert_eq!(tracker.reserved_bytes(), reserved, "the freed block was reused");
    assert!(clean.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
    let s = tracker.stats();
    assert_eq!((s.current, s.allocated), (4000, 4096));
}

#[test]
fn data_moved_out_of_its_storage_keeps_its_block() {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let a = Tensor::full([256], 3.0, Device::Cpu, MemoryKind::Activation).unwrap();
    let escaped = std::mem::replace(&mut *a.storage().write(), StorageData::Meta);
    drop(a);
    // the tracker entry is gone, the block is not: a new tensor gets other bytes
    let b = Tensor::full([256], 5.0, Device::Cpu, MemoryKind::Activation).unwrap();
    let StorageData::Cpu(data) = escaped else {
        panic!("cpu data")
    };
    assert!(data.to_f64(0..256).iter().all(|&v| v == 3.0));
    assert_eq!(b.to_vec_f32().unwrap()[0], 5.0);
}

#[test]
fn empty_cache_returns_free_segments_and_meta_agrees() {
    let run = |device| {
        let tracker = MemoryTracker::new(device);
        let _installed = MemoryTracker::install(tracker.clone());
        let keep = Tensor::zeros([100], DType::F32, device, MemoryKind::Parameter).unwrap();
        let big = Tensor::zeros([3 << 20], DType::F32, device, MemoryKind::Activation).unwrap();
        let small = Tensor::zeros([10], DType::F32, device, MemoryKind::Activation).unwrap();
        drop((big, small));
        let before = tracker.stats();
        let released = tracker.empty_cache();
        drop(keep);
        (before, released, tracker.stats())
    };
    let (cpu, meta) = (run(Device::Cpu), run(Device::META));
    // 12 MiB own segment released; the small segment holds `keep`
    assert_eq!(cpu.1, 12 << 20);
    assert_eq!(cpu.0.reserved, (12 << 20) + (2 << 20));
    assert_eq!(cpu.2.reserved, 2 << 20);
    assert_eq!(
        (cpu.0.reserved_peak, cpu.1, cpu.2.reserved),
        (meta.0.reserved_peak, meta.1, meta.2.reserved)
    );
}
