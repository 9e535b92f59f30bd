//! The size rules of the caching allocator, mirroring PyTorch's CUDA caching allocator
//! (`c10/cuda/CUDACachingAllocator.cpp`: no `max_split_size_mb`, no
//! `roundup_power2_divisions`; expandable segments on or off).
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
//! With expandable segments (`expandable_segments:True`) a pool is one address range of
//! [`EXPANDABLE_RANGE_BYTES`] (rounded down to whole pages) instead of separate segments:
//!
//! | rule | PyTorch name |
//! |---|---|
//! | pages are mapped in the target's page size per pool ([`expandable_page_bytes`]); only mapped pages count as reserved | `ExpandableSegment::map` |
//! | a free block's size for best fit is its size plus the unmapped block right after it | `get_free_block` |
//! | when no free block fits, the lowest address with enough free and unmapped room is mapped, a new range only when none has room | `find_expandable_block`, `map_block` |
//! | a range is [`EXPANDABLE_RANGE_BYTES`] of address space, or a larger request's size | `ExpandableSegment` (9/8 of the GPU) |
//! | every block is split when at least 512 B remain, in both pools | `should_split` |
//! | `empty_cache` unmaps the whole free pages of every free block, and releases a range with nothing mapped | `release_blocks`, `unmap_block` |
//!
//! A request of 0 bytes takes no block (PyTorch returns a null pointer for it).
//!
//! Every device follows these rules, the CPU included: they are the CUDA allocator's, and the
//! CUDA pool (`cuMemAlloc` segments, `storage/cuda_segment.rs`) applies them as they are, so
//! `Meta(Cuda)` and `Meta(Cpu)` make the same allocator decisions; what differs per target is
//! only the workspace ops ask for (`backend/target.rs`) and, with expandable segments, the
//! page size. Not modelled, because memopt does not use them: PyTorch's per-stream pools
//! (memopt runs one stream per GPU), `max_split_size_mb`, `roundup_power2_divisions`, and its release of only the smallest cached
//! segments that satisfy a failed `cudaMalloc` (memopt gives every cached free segment back,
//! then retries once). Memory outside the pool (context, modules, cuBLAS handles) is measured,
//! not predicted.

use crate::Target;

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

/// Address space of one expandable range, in bytes, before rounding down to whole pages: 1 TiB,
/// more than any device memopt plans for holds, so a second range per pool is only taken when
/// free gaps inside the first cannot be reused (PyTorch reserves 9/8 of the GPU's memory; a
/// fixed size keeps Meta's replay independent of the device). A larger request gets a range of
/// its own size.
pub const EXPANDABLE_RANGE_BYTES: u64 = 1 << 40;

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

/// Bytes mapped at a time into an expandable segment of `pool` on `target`; reserved memory
/// grows and shrinks in these steps, and Meta replays the target's.
///
/// - CPU: 2 MiB for both pools (one `mprotect` maps any number of pages, so larger pages would
///   only reserve more).
/// - CUDA: PyTorch's 2 MiB for the small pool and 20 MiB for the large one: the driver's
///   mapping cost grows with the number of physical allocations, and the GPU's granularity
///   (2 MiB on current GPUs, checked when a range is reserved) divides both.
pub const fn expandable_page_bytes(target: Target, pool: PoolKind) -> u64 {
    match (target, pool) {
        (_, PoolKind::Small) | (Target::Cpu, PoolKind::Large) => SMALL_BUFFER,
        (Target::Cuda, PoolKind::Large) => LARGE_BUFFER,
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
/// remainder stays free (PyTorch `should_split`): with expandable segments, whenever at least
/// [`MIN_BLOCK_SIZE`] remains.
pub fn should_split(pool: PoolKind, block: u64, rounded: u64, expandable: bool) -> bool {
    let remaining = block - rounded;
    match pool {
        _ if expandable => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => remaining > SMALL_SIZE,
    }
}

/// `a` rounded up to a multiple of `page`, or `None` past `u64::MAX`.
pub fn round_to_page(a: u64, page: u64) -> Option<u64> {
    round_up(a, page)
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
        assert!(should_split(PoolKind::Small, 1024, 512, false));
        assert!(!should_split(PoolKind::Small, 1024, 1024, false));
        assert!(!should_split(
            PoolKind::Large,
            LARGE_BUFFER,
            LARGE_BUFFER - SMALL_SIZE,
            false
        ));
        assert!(should_split(
            PoolKind::Large,
            LARGE_BUFFER,
            LARGE_BUFFER - SMALL_SIZE - 512,
            false
        ));
        // expandable segments split large blocks down to the last 512 B
        assert!(should_split(
            PoolKind::Large,
            LARGE_BUFFER,
            LARGE_BUFFER - 512,
            true
        ));
        assert!(!should_split(PoolKind::Large, LARGE_BUFFER, LARGE_BUFFER, true));
    }
}
