//! Blocks of a tracker's caching allocator, owned by the buffers that use them: host blocks
//! (CPU) and device blocks (CUDA), each holding the lease that gives the block back on drop.

use super::MemoryTracker;
use super::caching::{BlockId, SegmentMemory};
use std::ptr::NonNull;
use std::sync::Arc;

/// One block of a tracker's caching allocator, owned by the buffer that uses it: dropping the
/// lease gives the block back to the allocator's cache (its segment stays reserved). Because
/// the buffer owns the block (not the tracker entry), no two live buffers can ever share bytes.
#[derive(Debug)]
pub(super) struct BlockLease {
    pub(super) bytes: u64,
    pub(super) zeroed: bool,
    pub(super) tracker: Arc<MemoryTracker>,
    pub(super) block: BlockId,
    // Keeps the segment's memory alive while the block is used; dropped after the block is
    // returned.
    pub(super) segment: Arc<dyn SegmentMemory>,
    pub(super) offset: u64,
}

impl Drop for BlockLease {
    fn drop(&mut self) {
        self.tracker.free_block(self.block);
    }
}

impl BlockLease {
    /// The block as host memory; `None` when its segment has no host memory (not the CPU).
    pub(super) fn into_host(self) -> Option<HostBlock> {
        let base = self.segment.host_ptr()?;
        // SAFETY: `offset + size` lies within the segment (allocator invariant), so the offset
        // pointer stays inside the mapping and is non-null.
        let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(self.offset as usize)) };
        Some(HostBlock { ptr, lease: self })
    }

    /// The block as GPU memory; `None` when its segment has no GPU memory (not a CUDA device).
    pub(super) fn into_device(self) -> Option<DeviceBlock> {
        // The block lies within the segment (allocator invariant), whose addresses fit u64.
        let ptr = self.segment.device_ptr()? + self.offset;
        Some(DeviceBlock { ptr, lease: self })
    }
}

/// A block of host memory from the CPU tracker's caching allocator, owned by the buffer that
/// uses it: dropping it gives the block back to the allocator's cache.
#[derive(Debug)]
pub struct HostBlock {
    ptr: NonNull<u8>,
    lease: BlockLease,
}

// SAFETY: the block's bytes belong to this lease alone (the allocator hands a block out once
// until it is freed, which only this lease's drop does), like a `Vec`'s buffer.
unsafe impl Send for HostBlock {}
// SAFETY: `HostBlock` gives no access to the bytes through `&self` beyond the pointer value.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// First byte of the block; valid for [`HostBlock::bytes`] bytes, aligned to 512 bytes.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Size of the block in bytes (at least the bytes requested).
    pub fn bytes(&self) -> u64 {
        self.lease.bytes
    }

    /// Whether every byte is known to be zero (the block was never handed out before).
    pub fn is_zeroed(&self) -> bool {
        self.lease.zeroed
    }
}

/// A block of GPU memory from a CUDA tracker's caching allocator, owned by the buffer that uses
/// it: dropping it gives the block back to the allocator's cache. Work queued on the GPU's one
/// stream that still uses the block runs before any later use of it, which is queued after.
#[derive(Debug)]
pub struct DeviceBlock {
    ptr: u64,
    lease: BlockLease,
}

impl DeviceBlock {
    /// Device address (CUdeviceptr) of the block's first byte; valid for
    /// [`DeviceBlock::bytes`] bytes, aligned to 512 bytes.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Size of the block in bytes (at least the bytes requested).
    pub fn bytes(&self) -> u64 {
        self.lease.bytes
    }

    /// Whether every byte is known to be zero (its memory was zeroed when its segment was
    /// reserved or its pages mapped, and the block was never handed out since).
    pub fn is_zeroed(&self) -> bool {
        self.lease.zeroed
    }
}
