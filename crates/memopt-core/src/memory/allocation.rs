//! The guard that ties a buffer's lifetime to its tracker entry.

use super::caching::BlockId;
use super::{MemoryKind, MemoryTracker};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Identifier of a tracked buffer, unique within its tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocationId(pub u64);

/// A live tracked buffer. Created by [`MemoryTracker::allocate`]; records the free (and gives
/// its caching-allocator block back, when it owns it) when dropped.
#[derive(Debug)]
pub struct Allocation {
    id: AllocationId,
    bytes: u64,
    allocated: u64,
    block: Option<BlockId>,
    kind: AtomicU8,
    tracker: Arc<MemoryTracker>,
}

impl Allocation {
    pub(super) fn new(
        id: AllocationId,
        bytes: u64,
        allocated: u64,
        block: Option<BlockId>,
        kind: MemoryKind,
        tracker: Arc<MemoryTracker>,
    ) -> Self {
        Allocation {
            id,
            bytes,
            allocated,
            block,
            kind: AtomicU8::new(kind.index() as u8),
            tracker,
        }
    }

    /// Identifier within the tracker.
    pub fn id(&self) -> AllocationId {
        self.id
    }

    /// Size requested, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Size of its caching-allocator block, in bytes (the request rounded up).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated
    }

    /// Current kind.
    pub fn kind(&self) -> MemoryKind {
        // The atomic only ever holds indices written from a MemoryKind.
        MemoryKind::from_index(self.kind.load(Ordering::Relaxed) as usize).unwrap_or(MemoryKind::Activation)
    }

    /// The tracker that recorded this allocation.
    pub fn tracker(&self) -> &Arc<MemoryTracker> {
        &self.tracker
    }

    /// Changes the kind, recording a re-tag event when it differs.
    pub fn retag(&self, kind: MemoryKind) {
        let old = self.kind.swap(kind.index() as u8, Ordering::Relaxed);
        let old = MemoryKind::from_index(old as usize).unwrap_or(MemoryKind::Activation);
        if old != kind {
            self.tracker.record_retag(self, old, kind);
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let block = self.block.take();
        self.tracker.record_free(self, block);
    }
}
