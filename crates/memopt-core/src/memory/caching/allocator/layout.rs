//! The allocator's layout: every segment and block, as the rules see them. Two allocators with
//! equal layouts (and the same live blocks in them) decide every later request alike, so a
//! replay whose layout repeats at the same point of a cycle repeats from there on.

use super::CachingAllocator;
use crate::memory::caching::rules::PoolKind;

/// One block of a segment: offset and size in bytes, whether it is handed out, and whether
/// memory stands behind it (expandable ranges).
type BlockShape = (u64, u64, bool, bool);

/// One segment: pool, bytes of address space, page size of an expandable range, and its blocks
/// in address order.
type SegmentShape = (PoolKind, u64, Option<u64>, Vec<BlockShape>);

/// Every segment of an allocator, oldest first, with its blocks. Whether a block holds zeros
/// and the ids of blocks and segments are left out: no rule reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatorLayout {
    segments: Vec<SegmentShape>,
    reserved: u64,
}

impl CachingAllocator {
    /// The layout now (see [`AllocatorLayout`]).
    pub fn layout(&self) -> AllocatorLayout {
        let mut segments: Vec<(u64, SegmentShape)> = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .map(|(i, s)| {
                let mut blocks: Vec<BlockShape> = self
                    .blocks
                    .iter()
                    .flatten()
                    .filter(|b| b.segment == i)
                    .map(|b| (b.offset, b.size, b.allocated, b.mapped))
                    .collect();
                blocks.sort_unstable();
                (s.serial, (s.pool, s.bytes, s.page, blocks))
            })
            .collect();
        // Age decides best fit among equal sizes: order by it, without the serial numbers.
        segments.sort_unstable_by_key(|(serial, _)| *serial);
        AllocatorLayout {
            segments: segments.into_iter().map(|(_, s)| s).collect(),
            reserved: self.reserved,
        }
    }
}
