//! Where a caching allocator's segments get their memory.

use crate::{CoreError, Result};
use std::fmt::Debug;
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory of one segment, or of one expandable range whose pages are mapped as it grows.
/// Dropping the last handle gives it back to the system.
pub trait SegmentMemory: Send + Sync + Debug {
    /// First byte of the segment in this process's address space, for host memory; `None` for
    /// memory the host cannot address.
    fn host_ptr(&self) -> Option<NonNull<u8>>;

    /// Device address (CUdeviceptr) of the segment's first byte, for GPU memory; `None` for
    /// memory a GPU cannot address.
    fn device_ptr(&self) -> Option<u64> {
        None
    }

    /// Maps zero-filled memory at bytes `offset..offset + bytes` of an expandable range (both
    /// multiples of its page size, nothing mapped there yet). An error (out of memory) leaves
    /// nothing mapped there. Fixed segments cannot map pages.
    fn map_pages(&self, offset: u64, bytes: u64) -> Result<()> {
        let _ = offset;
        Err(CoreError::invalid(
            "SegmentMemory::map_pages",
            format!("a fixed segment cannot map {bytes} more bytes; only expandable ranges can"),
        ))
    }

    /// Gives back the memory mapped at bytes `offset..offset + bytes` of an expandable range
    /// (whole pages, none of them holding a live block). Failures a backing cannot act on are
    /// recorded where its next checked call reports them. Nothing for a fixed segment.
    fn unmap_pages(&self, offset: u64, bytes: u64) {
        let _ = (offset, bytes);
    }
}

/// Provides segments to a caching allocator: real memory (host pages, GPU memory) or
/// none at all (Meta replays the allocator's arithmetic with no memory behind it).
pub trait SegmentBacking: Send + Debug {
    /// A new segment of `bytes` bytes, all zero when it has memory; `Ok(None)` when this backing
    /// has no memory behind its segments. An error when the system cannot provide it.
    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>>;

    /// A new expandable range of `bytes` bytes of address space, nothing mapped, whose pages
    /// are `page` bytes; `Ok(None)` when this backing has no memory behind its segments. An
    /// error when the system cannot reserve the range or maps in a coarser granularity.
    fn reserve_range(&mut self, bytes: u64, page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let _ = page;
        Err(CoreError::invalid(
            "SegmentBacking::reserve_range",
            format!(
                "this backing has no expandable segments (asked for a range of {bytes} bytes); \
                 use expandable_segments:False"
            ),
        ))
    }
}

/// A backing without memory: segments are numbers only (Meta, and devices whose memory is
/// allocated elsewhere).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoBacking;

impl SegmentBacking for NoBacking {
    fn reserve(&mut self, _bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        Ok(None)
    }

    fn reserve_range(&mut self, _bytes: u64, _page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        Ok(None)
    }
}
