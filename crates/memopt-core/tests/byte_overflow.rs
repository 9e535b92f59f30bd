//! Byte counts never wrap: Meta storages are not bounded by real memory, so the bytes a tracker
//! holds could exceed `u64`; the allocation that would overflow is an error naming the module
//! and the sizes, and the tracker's figures stay as they were.

use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{AllocatorConfig, CoreError, DType, Device, MemoryKind, MemoryTracker, Tensor};

#[test]
fn an_allocation_that_would_overflow_the_byte_count_is_an_error() {
    for config in [AllocatorConfig::FIXED, AllocatorConfig::EXPANDABLE] {
        overflow_is_an_error(config);
    }
}

fn overflow_is_an_error(config: AllocatorConfig) {
    let tracker = MemoryTracker::with_config(Device::META, config);
    let _installed = MemoryTracker::install(tracker.clone());
    // Each about 0.4 * 2^64 bytes (below isize::MAX, the largest one storage may be): two fit
    // in the requested, allocated and reserved counts (the caching allocator rounds each to its
    // own segment, or its own expandable range), three exceed u64.
    let len = (u64::MAX / 5 * 2 / 4) as usize;
    let a = Tensor::zeros([len], DType::F32, Device::META, MemoryKind::Activation).unwrap();
    let b = Tensor::zeros([len], DType::F32, Device::META, MemoryKind::Activation).unwrap();
    let before = tracker.stats();
    let _scope = enter_scope(Scope::new("features.3", Phase::Forward));
    let e = Tensor::zeros([len], DType::F32, Device::META, MemoryKind::Activation).unwrap_err();
    assert!(matches!(e, CoreError::ByteCountOverflow { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("module features.3 (forward)") && msg.contains(&format!("{} held", before.current)),
        "{msg}"
    );
    let after = tracker.stats();
    assert_eq!(
        (after.current, after.peak, after.live_allocations),
        (before.current, before.peak, before.live_allocations)
    );
    drop((a, b));
    assert_eq!(tracker.current_bytes(), 0);
}
