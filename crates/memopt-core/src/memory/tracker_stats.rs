//! The figures a memory tracker reports: requested, allocated and reserved bytes with their
//! peaks, overall and per kind.

use super::MemoryKind;
use crate::Device;

/// Current and peak bytes of one kind: as requested by tensors, and as allocated (each request
/// rounded to its caching-allocator block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Requested bytes of this kind held now.
    pub current: u64,
    /// Most requested bytes of this kind held at once since creation or the last
    /// [`MemoryTracker::reset_peak`](super::MemoryTracker::reset_peak).
    pub peak: u64,
    /// Allocated (block) bytes of this kind held now.
    pub allocated: u64,
    /// Most allocated bytes of this kind held at once.
    pub allocated_peak: u64,
}

/// A snapshot of a tracker's figures. Three levels, each with its peak: *requested* (the bytes
/// tensors asked for: `current`, `peak`), *allocated* (the caching allocator's blocks handed
/// out, each request rounded) and *reserved* (the segments the allocator holds from the
/// device, allocated blocks and cached free ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStats {
    /// Device tracked.
    pub device: Device,
    /// Requested bytes held now.
    pub current: u64,
    /// Most requested bytes held at once since creation or the last reset.
    pub peak: u64,
    /// Allocated (block) bytes held now.
    pub allocated: u64,
    /// Most allocated bytes held at once.
    pub allocated_peak: u64,
    /// Reserved (segment) bytes held now.
    pub reserved: u64,
    /// Most reserved bytes held at once.
    pub reserved_peak: u64,
    /// Segments held now.
    pub segments: u64,
    /// Figures per kind, indexed by [`MemoryKind::index`]; reserved bytes have no kind (a
    /// segment holds blocks of any kind).
    pub by_kind: [KindStats; MemoryKind::COUNT],
    /// Buffers alive now.
    pub live_allocations: u64,
    /// Events recorded since creation.
    pub events: u64,
}

impl MemoryStats {
    /// Figures of one kind.
    pub fn kind(&self, kind: MemoryKind) -> KindStats {
        self.by_kind[kind.index()]
    }
}
