//! The caching allocator behind every tracker: PyTorch-style size rounding, small and large
//! pools of segments, best-fit reuse, splitting, coalescing and `empty_cache` ([`rules`] lists
//! the rules). Its bookkeeping is device-agnostic; a [`SegmentBacking`] decides what memory, if
//! any, stands behind a segment (host pages on the CPU, nothing on Meta).

mod allocator;
mod backing;
pub mod rules;

pub use allocator::{BlockId, CachingAllocator, Grant};
pub use backing::{NoBacking, SegmentBacking, SegmentMemory};
