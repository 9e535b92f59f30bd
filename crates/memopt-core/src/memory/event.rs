//! One tracker event.

use super::{AllocationId, MemoryKind, Scope};
use crate::Device;

/// What happened to a tracked buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryAction {
    /// The buffer was allocated.
    Alloc,
    /// The buffer was freed.
    Free,
    /// The buffer changed role (e.g. activation -> saved for backward); its bytes move between
    /// kinds, the total does not change.
    Retag {
        /// The previous kind; the event's `kind` is the new one.
        from: MemoryKind,
    },
}

/// One allocation, free or re-tag, as delivered to subscribers.
#[derive(Debug, Clone)]
pub struct MemoryEvent {
    /// Position in the tracker's event stream, from 0.
    pub seq: u64,
    /// What happened.
    pub action: MemoryAction,
    /// Which buffer.
    pub allocation: AllocationId,
    /// Size of the buffer as requested, in bytes.
    pub bytes: u64,
    /// Size of its caching-allocator block, in bytes (`bytes` rounded up).
    pub allocated: u64,
    /// Kind of the buffer after the event.
    pub kind: MemoryKind,
    /// Device of the tracker.
    pub device: Device,
    /// Module path and phase at the time of the event.
    pub scope: Scope,
    /// Requested bytes held on the device after the event.
    pub current_bytes: u64,
    /// Allocated (block) bytes held on the device after the event.
    pub current_allocated: u64,
    /// Reserved (segment) bytes held on the device after the event.
    pub current_reserved: u64,
    /// Nanoseconds since the tracker was created.
    pub time_ns: u64,
}

impl MemoryEvent {
    /// Signed change of the device's requested bytes caused by this event.
    pub fn delta(&self) -> i64 {
        match self.action {
            MemoryAction::Alloc => self.bytes as i64,
            MemoryAction::Free => -(self.bytes as i64),
            MemoryAction::Retag { .. } => 0,
        }
    }
}
