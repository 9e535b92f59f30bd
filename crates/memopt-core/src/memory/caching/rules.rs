//! The size rules of the caching allocator, mirroring PyTorch's CUDA caching allocator
//! (`c10/cuda/CUDACachingAllocator.cpp`, default configuration: no `max_split_size_mb`, no
//! `roundup_power2_divisions`, no expandable segments).
//!
//! | rule | value | PyTorch name |
//! |---|---|---|
//! | every block size is a multiple of 512 B, at least 512 B | 512 B | `kMinBlockSize`, `round_size` |
//! | a rounded size of at most 1 MiB is *small* | 1 MiB | `kSmallSize`, `get_pool` |
//! | small blocks come from 2 MiB segments | 2 MiB | `kSmallBuffer`, `get_allocation_size` |
//! | large blocks under 10 MiB come from 20 MiB segments | 20 MiB | `kLargeBuffer`, `kMinLargeAlloc` |
//! | larger blocks get a segment of their size rounded up to 2 MiB | 2 MiB | `kRoundLarge` |
//! | a small block is split when at least 512 B remain; a large one when more than 1 MiB remains | | `should_split` |
//!
//! A request of 0 bytes takes no block (PyTorch returns a null pointer for it).
//!
//! Every device follows these rules, the CPU included: they are the CUDA allocator's, and the
//! CUDA pool (`cuMemAlloc` segments, `storage/cuda_segment.rs`) applies them as they are, so
//! `Meta(Cuda)` and `Meta(Cpu)` make the same allocator decisions; what differs per target is
//! only the workspace ops ask for (`backend/target.rs`). Not modelled, because memopt does not
//! use them: PyTorch's per-stream pools (memopt runs one stream per GPU), expandable segments,
//! `max_split_size_mb`, `roundup_power2_divisions`, and its release of only the smallest cached
//! segments that satisfy a failed `cudaMalloc` (memopt gives every cached free segment back,
//! then retries once). Memory outside the pool (context, modules, cuBLAS handles) is measured,
//! not predicted.

/// Every block is a multiple of this many bytes (PyTorch `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest rounded size served from the small pool, in bytes (PyTorch `kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Size of a small-pool segment, in bytes (PyTorch `kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Size of a large-pool segment for blocks under [`MIN_LARGE_ALLOC`], in bytes (PyTorch `kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Blocks of at least this many bytes get a segment of their own size (PyTorch `kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Own-size segments are rounded up to a multiple of this many bytes (PyTorch `kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// Which pool a block lives in; segments of one pool never serve the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// Rounded sizes up to [`SMALL_SIZE`], from [`SMALL_BUFFER`] segments.
    Small,
    /// Everything larger.
    Large,
}

impl PoolKind {
    /// The pool serving a block of `rounded` bytes.
    pub const fn for_size(rounded: u64) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// Position in per-pool arrays.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// `a` rounded up to a multiple of `m`, or `None` past `u64::MAX`.
fn round_up(a: u64, m: u64) -> Option<u64> {
    a.checked_add(m - 1).map(|x| x / m * m)
}

/// The block size for a request of `bytes` bytes: 0 for 0 (no block), else `bytes` rounded up
/// to a multiple of [`MIN_BLOCK_SIZE`]; `None` when that overflows.
pub fn round_size(bytes: u64) -> Option<u64> {
    if bytes == 0 {
        Some(0)
    } else {
        round_up(bytes, MIN_BLOCK_SIZE)
    }
}

/// The size of a new segment for a block of `rounded` bytes (PyTorch `get_allocation_size`);
/// `None` when it overflows.
pub fn segment_size(rounded: u64) -> Option<u64> {
    if rounded <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if rounded < MIN_LARGE_ALLOC {
        Some(LARGE_BUFFER)
    } else {
        round_up(rounded, ROUND_LARGE)
    }
}

/// Whether a free block of `block` bytes in `pool`, serving `rounded` bytes, is split so the
/// remainder stays free (PyTorch `should_split`).
pub fn should_split(pool: PoolKind, block: u64, rounded: u64) -> bool {
    let remaining = block - rounded;
    match pool {
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => remaining > SMALL_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_segments_follow_pytorch() {
        assert_eq!(round_size(0), Some(0));
        assert_eq!(round_size(1), Some(512));
        assert_eq!(round_size(512), Some(512));
        assert_eq!(round_size(513), Some(1024));
        assert_eq!(round_size(u64::MAX), None);
        assert_eq!(PoolKind::for_size(SMALL_SIZE), PoolKind::Small);
        assert_eq!(PoolKind::for_size(SMALL_SIZE + 512), PoolKind::Large);
        assert_eq!(segment_size(512), Some(SMALL_BUFFER));
        assert_eq!(segment_size(SMALL_SIZE + 512), Some(LARGE_BUFFER));
        assert_eq!(segment_size(MIN_LARGE_ALLOC - 512), Some(LARGE_BUFFER));
        assert_eq!(
            segment_size(MIN_LARGE_ALLOC + 512),
            Some(MIN_LARGE_ALLOC + ROUND_LARGE)
        );
        assert!(should_split(PoolKind::Small, 1024, 512));
        assert!(!should_split(PoolKind::Small, 1024, 1024));
        assert!(!should_split(
            PoolKind::Large,
            LARGE_BUFFER,
            LARGE_BUFFER - SMALL_SIZE
        ));
        assert!(should_split(
            PoolKind::Large,
            LARGE_BUFFER,
            LARGE_BUFFER - SMALL_SIZE - 512
        ));
    }
}
