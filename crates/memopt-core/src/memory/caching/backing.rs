//! Where a caching allocator's segments get their memory.

use crate::Result;
use std::fmt::Debug;
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory of one segment. Dropping the last handle gives it back to the system.
pub trait SegmentMemory: Send + Sync + Debug {
    /// First byte of the segment in this process's address space, for host memory; `None` for
    /// memory the host cannot address.
    fn host_ptr(&self) -> Option<NonNull<u8>>;

    /// Device address (CUdeviceptr) of the segment's first byte, for GPU memory; `None` for
    /// memory a GPU cannot address.
    fn device_ptr(&self) -> Option<u64> {
        None
    }
}

/// Provides segments to a caching allocator: real memory (host pages, GPU memory) or
/// none at all (Meta replays the allocator's arithmetic with no memory behind it).
pub trait SegmentBacking: Send + Debug {
    /// A new segment of `bytes` bytes, all zero when it has memory; `Ok(None)` when this backing
    /// has no memory behind its segments. An error when the system cannot provide it.
    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>>;
}

/// A backing without memory: segments are numbers only (Meta, and devices whose memory is
/// allocated elsewhere).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoBacking;

impl SegmentBacking for NoBacking {
    fn reserve(&mut self, _bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        Ok(None)
    }
}
