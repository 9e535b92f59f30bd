//! A GPU without a GPU: a segment backing of fixed capacity whose segments have made-up device
//! addresses (never dereferenced), so a tracker for `cuda:0` runs its caching allocator, its
//! device blocks and its out-of-memory path on any machine.

use memopt_core::memory::caching::{SegmentBacking, SegmentMemory};
use memopt_core::{CoreError, Device, Result};
use std::sync::{Arc, Mutex};

/// Bytes the fake driver holds now (shared with the test).
pub type Used = Arc<Mutex<u64>>;

/// Segments from a device of `capacity` bytes, at increasing made-up addresses.
#[derive(Debug)]
pub struct FakeGpu {
    pub capacity: u64,
    pub used: Used,
    next_address: u64,
}

impl FakeGpu {
    /// A device of `capacity` bytes and the counter of what it holds.
    pub fn new(capacity: u64) -> (FakeGpu, Used) {
        let used = Used::default();
        (
            FakeGpu {
                capacity,
                used: used.clone(),
                next_address: 1 << 40,
            },
            used,
        )
    }
}

#[derive(Debug)]
struct FakeSegment {
    address: u64,
    bytes: u64,
    used: Used,
}

impl SegmentMemory for FakeSegment {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    fn device_ptr(&self) -> Option<u64> {
        Some(self.address)
    }
}

impl Drop for FakeSegment {
    fn drop(&mut self) {
        *self.used.lock().unwrap() -= self.bytes;
    }
}

/// An expandable range: address space only, its mapped pages counted as the driver's.
#[derive(Debug)]
struct FakeRange {
    address: u64,
    capacity: u64,
    used: Used,
    mapped: Mutex<u64>,
}

impl SegmentMemory for FakeRange {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    fn device_ptr(&self) -> Option<u64> {
        Some(self.address)
    }

    fn map_pages(&self, _offset: u64, bytes: u64) -> Result<()> {
        let mut used = self.used.lock().unwrap();
        if *used + bytes > self.capacity {
            return Err(CoreError::OutOfMemory {
                device: Device::Cuda(0),
                bytes,
            });
        }
        *used += bytes;
        *self.mapped.lock().unwrap() += bytes;
        Ok(())
    }

    fn unmap_pages(&self, _offset: u64, bytes: u64) {
        *self.used.lock().unwrap() -= bytes;
        *self.mapped.lock().unwrap() -= bytes;
    }
}

impl Drop for FakeRange {
    fn drop(&mut self) {
        *self.used.lock().unwrap() -= *self.mapped.lock().unwrap();
    }
}

impl SegmentBacking for FakeGpu {
    fn reserve_range(&mut self, bytes: u64, _page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let address = self.next_address;
        self.next_address += bytes;
        Ok(Some(Arc::new(FakeRange {
            address,
            capacity: self.capacity,
            used: self.used.clone(),
            mapped: Mutex::new(0),
        })))
    }

    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let mut used = self.used.lock().unwrap();
        if *used + bytes > self.capacity {
            return Err(CoreError::OutOfMemory {
                device: Device::Cuda(0),
                bytes,
            });
        }
        *used += bytes;
        let address = self.next_address;
        self.next_address += bytes;
        Ok(Some(Arc::new(FakeSegment {
            address,
            bytes,
            used: self.used.clone(),
        })))
    }
}
