//! A GPU that runs out of memory, without a GPU: a tracker for `cuda:0` whose segments come from
//! a backing of fixed capacity. The error names the bytes asked and the bytes held, the tracker
//! is unchanged by the refusal, and the cache is given back before the allocator gives up.

use memopt_core::memory::caching::{SegmentBacking, SegmentMemory};
use memopt_core::{CoreError, Device, MemoryKind, MemoryTracker, Result};
use std::sync::{Arc, Mutex};

/// Segments are numbers only, from a device of `capacity` bytes; `used` is shared so the test
/// sees what the "driver" holds.
#[derive(Debug)]
struct FixedCapacity {
    capacity: u64,
    used: Arc<Mutex<u64>>,
}

#[derive(Debug)]
struct Counted {
    bytes: u64,
    used: Arc<Mutex<u64>>,
}

impl SegmentMemory for Counted {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        *self.used.lock().unwrap() -= self.bytes;
    }
}

impl SegmentBacking for FixedCapacity {
    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let mut used = self.used.lock().unwrap();
        if *used + bytes > self.capacity {
            return Err(CoreError::OutOfMemory {
                device: Device::Cuda(0),
                bytes,
            });
        }
        *used += bytes;
        Ok(Some(Arc::new(Counted {
            bytes,
            used: self.used.clone(),
        })))
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn cuda_out_of_memory_names_the_request_and_what_is_held() {
    let used = Arc::new(Mutex::new(0));
    let tracker = MemoryTracker::with_backing(
        Device::Cuda(0),
        Box::new(FixedCapacity {
            capacity: 24 * MIB,
            used: used.clone(),
        }),
    );
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
    let tracker = MemoryTracker::with_backing(
        Device::Cpu,
        Box::new(FixedCapacity {
            capacity: MIB,
            used: Arc::new(Mutex::new(0)),
        }),
    );
    let e = tracker.allocate(4 * MIB, MemoryKind::Activation).unwrap_err();
    assert!(
        e.is_out_of_memory() && matches!(e, CoreError::OutOfMemory { .. }),
        "{e}"
    );
}
