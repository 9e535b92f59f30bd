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

/// An expandable range: address space only, its mapped pages counted as the driver's. It
/// checks what a driver would refuse: pages mapped twice, unmapped while not mapped, or not
/// whole pages.
#[derive(Debug)]
struct FakeRange {
    address: u64,
    capacity: u64,
    page: u64,
    used: Used,
    mapped: Mutex<std::collections::BTreeSet<u64>>,
}

impl FakeRange {
    /// The page indices of `offset..offset + bytes`, which must be whole pages.
    fn pages(&self, offset: u64, bytes: u64) -> std::ops::Range<u64> {
        assert!(
            offset.is_multiple_of(self.page) && bytes.is_multiple_of(self.page) && bytes > 0,
            "{offset}..+{bytes} is not whole {}-byte pages",
            self.page
        );
        offset / self.page..(offset + bytes) / self.page
    }
}

impl SegmentMemory for FakeRange {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    fn device_ptr(&self) -> Option<u64> {
        Some(self.address)
    }

    fn map_pages(&self, offset: u64, bytes: u64) -> Result<()> {
        let pages = self.pages(offset, bytes);
        let mut used = self.used.lock().unwrap();
        let mut mapped = self.mapped.lock().unwrap();
        // page by page, as the CUDA range maps them: the pages mapped before a refusal go back
        let mut done = Vec::new();
        for p in pages {
            if *used + self.page > self.capacity {
                for q in done {
                    mapped.remove(&q);
                    *used -= self.page;
                }
                return Err(CoreError::OutOfMemory {
                    device: Device::Cuda(0),
                    bytes,
                });
            }
            assert!(mapped.insert(p), "page {p} mapped twice");
            *used += self.page;
            done.push(p);
        }
        Ok(())
    }

    fn unmap_pages(&self, offset: u64, bytes: u64) {
        let mut mapped = self.mapped.lock().unwrap();
        for p in self.pages(offset, bytes) {
            assert!(mapped.remove(&p), "page {p} unmapped while not mapped");
            *self.used.lock().unwrap() -= self.page;
        }
    }
}

impl Drop for FakeRange {
    fn drop(&mut self) {
        let pages = self.mapped.lock().unwrap().len() as u64;
        *self.used.lock().unwrap() -= pages * self.page;
    }
}

impl SegmentBacking for FakeGpu {
    fn reserve_range(&mut self, bytes: u64, page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let address = self.next_address;
        self.next_address += bytes;
        Ok(Some(Arc::new(FakeRange {
            address,
            capacity: self.capacity,
            page,
            used: self.used.clone(),
            mapped: Mutex::new(Default::default()),
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
