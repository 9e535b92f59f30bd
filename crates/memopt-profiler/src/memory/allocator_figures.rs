//! The caching allocator's three levels over a recording: requested, allocated and reserved.

use serde::{Deserialize, Serialize};

/// Bytes at one moment on the three levels of the caching allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorLevels {
    /// Bytes tensors asked for.
    pub requested_bytes: u64,
    /// Bytes of the allocator's blocks handed out (each request rounded up to 512 B).
    pub allocated_bytes: u64,
    /// Bytes of the segments the allocator holds from the device (allocated and cached).
    pub reserved_bytes: u64,
}

impl AllocatorLevels {
    /// The peaks `tracker` has seen on each level (since its last `reset_peak`), in bytes.
    pub fn peaks_of(tracker: &memopt_core::MemoryTracker) -> AllocatorLevels {
        let s = tracker.stats();
        AllocatorLevels {
            requested_bytes: s.peak,
            allocated_bytes: s.allocated_peak,
            reserved_bytes: s.reserved_peak,
        }
    }

    /// Reserved bytes not allocated to any tensor: cached free blocks and split remainders.
    pub fn fragmentation_bytes(&self) -> u64 {
        self.reserved_bytes.saturating_sub(self.allocated_bytes)
    }
}

/// Peaks of the three levels over a recording, and the levels at the moment each peak was
/// first reached. Reserved is what runs out on a device; fragmentation is reserved - allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorFigures {
    /// Most requested bytes held at once (the report's `peak_bytes`).
    pub requested_peak_bytes: u64,
    /// Most allocated bytes held at once.
    pub allocated_peak_bytes: u64,
    /// Most reserved bytes held at once.
    pub reserved_peak_bytes: u64,
    /// The three levels when requested bytes peaked.
    pub at_requested_peak: AllocatorLevels,
    /// The three levels when reserved bytes peaked.
    pub at_reserved_peak: AllocatorLevels,
}

impl AllocatorFigures {
    /// Figures starting from `now` (the levels when a recording starts).
    pub fn starting_at(now: AllocatorLevels) -> AllocatorFigures {
        AllocatorFigures {
            requested_peak_bytes: now.requested_bytes,
            allocated_peak_bytes: now.allocated_bytes,
            reserved_peak_bytes: now.reserved_bytes,
            at_requested_peak: now,
            at_reserved_peak: now,
        }
    }

    /// Takes the levels after one event into account.
    pub fn observe(&mut self, now: AllocatorLevels) {
        if now.requested_bytes > self.requested_peak_bytes {
            self.requested_peak_bytes = now.requested_bytes;
            self.at_requested_peak = now;
        }
        self.allocated_peak_bytes = self.allocated_peak_bytes.max(now.allocated_bytes);
        if now.reserved_bytes > self.reserved_peak_bytes {
            self.reserved_peak_bytes = now.reserved_bytes;
            self.at_reserved_peak = now;
        }
    }

    /// Reserved - allocated at the reserved peak, in bytes.
    pub fn fragmentation_bytes(&self) -> u64 {
        self.at_reserved_peak.fragmentation_bytes()
    }
}
