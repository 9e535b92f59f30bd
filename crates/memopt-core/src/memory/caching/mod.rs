//! The caching allocator behind every tracker: PyTorch-style size rounding, small and large
//! pools of segments (fixed, or expandable ranges that map pages as they grow), best-fit reuse,
//! splitting, coalescing and `empty_cache` ([`rules`] lists the rules). Its bookkeeping is
//! device-agnostic; a [`SegmentBacking`] decides what memory, if any, stands behind a segment
//! (host pages on the CPU, GPU memory on CUDA, nothing on Meta).

mod allocator;
mod backing;
mod config;
pub mod rules;

pub use allocator::{AllocatorLayout, BlockId, CachingAllocator, Grant};
pub use backing::{NoBacking, SegmentBacking, SegmentMemory};
pub use config::{AllocatorConfig, AllocatorConfigGuard};
