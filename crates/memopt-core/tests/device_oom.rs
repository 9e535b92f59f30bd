//! A GPU that runs out of memory, without a GPU: a tracker for `cuda:0` whose segments come from
//! a fake GPU of fixed capacity. The error names the bytes asked and the bytes held, the tracker
//! is unchanged by the refusal, and the cache is given back before the allocator gives up.

mod fake_gpu;

use fake_gpu::FakeGpu;
use memopt_core::{AllocatorConfig, CoreError, Device, MemoryKind, MemoryTracker};

const MIB: u64 = 1 << 20;

#[test]
fn cuda_out_of_memory_names_the_request_and_what_is_held() {
    let (gpu, used) = FakeGpu::new(24 * MIB);
    let tracker = MemoryTracker::with_backing(Device::Cuda(0), Box::new(gpu));
    let a = tracker.allocate(3 * MIB, MemoryKind::Activation).unwrap();
    let b = tracker.allocate(100, MemoryKind::Parameter).unwrap();
    // a 20 MiB large segment and a 2 MiB small one
    assert_eq!(tracker.reserved_bytes(), 22 * MIB);
    assert_eq!(*used.lock().unwrap(), 22 * MIB);
    let before = tracker.stats();
    let e = tracker.allocate(22 * MIB, MemoryKind::Activation).unwrap_err();
    assert!(e.is_out_of_memory());
    assert_eq!(
        e,
        CoreError::CudaOutOfMemory {
            device: Device::Cuda(0),
            bytes: 22 * MIB,
            segment_bytes: 22 * MIB,
            held: 3 * MIB + 100,
            reserved: 22 * MIB,
        }
    );
    let msg = e.to_string();
    for part in [
        "cuda:0",
        "23068672 bytes (a new segment",
        "3145828 bytes",
        "23068672 bytes",
        "--budget",
    ] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
    // the refusal recorded nothing
    assert_eq!(tracker.stats(), before);
    // a 22 MiB block needs its own segment, and 22 + 22 MiB exceed the 24 MiB device; once the
    // 3 MiB block is freed, its cached 20 MiB segment (too small to serve 22 MiB) is given back
    // and the segment is asked for again, into the room that leaves
    drop(a);
    let c = tracker.allocate(22 * MIB, MemoryKind::Activation).unwrap();
    assert_eq!(tracker.reserved_bytes(), 2 * MIB + 22 * MIB);
    assert_eq!(*used.lock().unwrap(), 24 * MIB);
    drop((b, c));
    assert_eq!(tracker.empty_cache(), 24 * MIB);
    assert_eq!(*used.lock().unwrap(), 0);
}

#[test]
fn host_out_of_memory_keeps_its_own_error() {
    let tracker = MemoryTracker::with_backing(Device::Cpu, Box::new(FakeGpu::new(MIB).0));
    let e = tracker.allocate(4 * MIB, MemoryKind::Activation).unwrap_err();
    assert!(
        e.is_out_of_memory() && matches!(e, CoreError::OutOfMemory { .. }),
        "{e}"
    );
}

#[test]
fn an_expandable_pool_out_of_memory_changes_nothing_and_unmaps_its_cache_first() {
    let (gpu, used) = FakeGpu::new(64 * MIB);
    let tracker =
        MemoryTracker::with_backing_and_config(Device::Cuda(0), Box::new(gpu), AllocatorConfig::EXPANDABLE);
    let a = tracker.allocate(30 * MIB, MemoryKind::Activation).unwrap();
    let b = tracker.allocate(3 * MIB, MemoryKind::Activation).unwrap();
    // two 20 MiB pages of the large pool's range: 0..30 MiB and 30..33 MiB
    assert_eq!(
        (tracker.reserved_bytes(), *used.lock().unwrap()),
        (40 * MIB, 40 * MIB)
    );
    let before = tracker.stats();
    // 30 MiB more needs two more pages; the fake GPU has room for one
    let e = tracker.allocate(30 * MIB, MemoryKind::Activation).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    assert_eq!(tracker.stats(), before, "a refused mapping recorded nothing");
    assert_eq!(
        *used.lock().unwrap(),
        40 * MIB,
        "the page mapped before the failure went back"
    );
    // a small request whose first page fails: its new range goes back too
    let (tiny_gpu, tiny_used) = FakeGpu::new(MIB);
    let tiny = MemoryTracker::with_backing_and_config(
        Device::Cuda(0),
        Box::new(tiny_gpu),
        AllocatorConfig::EXPANDABLE,
    );
    let before = tiny.stats();
    assert!(
        tiny.allocate(100, MemoryKind::Activation)
            .unwrap_err()
            .is_out_of_memory()
    );
    assert_eq!((tiny.stats(), *tiny_used.lock().unwrap()), (before, 0));
    // freeing a leaves the whole page 0..20 MiB free: the allocator unmaps it and retries
    drop(a);
    let c = tracker.allocate(30 * MIB, MemoryKind::Activation).unwrap();
    assert_eq!(*used.lock().unwrap(), tracker.reserved_bytes());
    drop((b, c));
    let reserved = tracker.reserved_bytes();
    assert_eq!(tracker.empty_cache(), reserved);
    assert_eq!(
        (
            tracker.reserved_bytes(),
            tracker.stats().segments,
            *used.lock().unwrap()
        ),
        (0, 0, 0)
    );
}
