//! Block and segment bookkeeping of the caching allocator: best-fit search, splitting,
//! coalescing and `empty_cache`, independent of what memory (if any) stands behind a segment.
//! Fixed segments here; the expandable ranges' mapping and unmapping in [`expandable`].

mod expandable;
mod layout;

use super::AllocatorConfig;
use super::backing::{SegmentBacking, SegmentMemory};
use super::rules::{PoolKind, expandable_page_bytes, round_size, round_to_page, segment_size, should_split};
use crate::{CoreError, Device, Result};
use std::collections::BTreeSet;
use std::sync::Arc;

pub use layout::AllocatorLayout;

/// A block handed out by [`CachingAllocator::malloc`]; give it back with [`CachingAllocator::free`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(usize);

/// What a successful [`CachingAllocator::malloc`] hands out.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The block; `None` for a request of 0 bytes.
    pub block: Option<BlockId>,
    /// Size of the block in bytes (the request rounded, or a whole free block too small to split).
    pub size: u64,
    /// The segment's memory and the block's offset in it, in bytes; `None` without a backing.
    pub memory: Option<(Arc<dyn SegmentMemory>, u64)>,
    /// Whether every byte of the block is known to be zero (never handed out since its memory
    /// was reserved or mapped), so a zero-filled buffer needs no fill.
    pub zeroed: bool,
}

#[derive(Debug)]
struct Block {
    segment: usize,
    offset: u64,
    size: u64,
    allocated: bool,
    /// Whether memory stands behind the block: always for fixed segments; in an expandable
    /// range, unmapped blocks are address space only (never allocated, page-aligned).
    mapped: bool,
    zeroed: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Block {
    fn is_free(&self) -> bool {
        !self.allocated && self.mapped
    }
}

#[derive(Debug)]
struct Segment {
    serial: u64,
    /// Bytes of address space: a fixed segment's size, or an expandable range's, mapped or not.
    bytes: u64,
    pool: PoolKind,
    /// Page size of an expandable range, in bytes; `None` for a fixed segment.
    page: Option<u64>,
    memory: Option<Arc<dyn SegmentMemory>>,
}

/// Free blocks of one pool, ordered for best fit: size, then segment age, then offset.
type FreeSet = BTreeSet<(u64, u64, u64, usize)>;
/// Unmapped blocks of one pool, in address order: segment age, then offset.
type UnmappedSet = BTreeSet<(u64, u64, usize)>;

/// Device-agnostic caching allocator in the manner of PyTorch's CUDA caching allocator (rules in
/// [`super::rules`]): requests are rounded, served best-fit from cached free blocks of their
/// pool, split when the remainder is worth keeping, coalesced with free neighbours when freed,
/// and new memory is reserved from the backing only when no free block fits: a new segment, or
/// with expandable segments, more pages mapped into the pool's range. Memory is kept until
/// [`CachingAllocator::empty_cache`]. The arithmetic never depends on addresses, so Meta (no
/// backing) and the CPU (host backing) make identical decisions.
#[derive(Debug)]
pub struct CachingAllocator {
    device: Device,
    backing: Box<dyn SegmentBacking>,
    /// Page size per pool with expandable segments, in bytes; `None` for fixed segments.
    pages: Option<[u64; 2]>,
    blocks: Vec<Option<Block>>,
    vacant_blocks: Vec<usize>,
    segments: Vec<Option<Segment>>,
    vacant_segments: Vec<usize>,
    next_serial: u64,
    free: [FreeSet; 2],
    unmapped: [UnmappedSet; 2],
    reserved: u64,
    reserve_limit: Option<u64>,
}

impl CachingAllocator {
    /// An empty allocator with fixed segments for `device`, whose segments come from `backing`.
    pub fn new(device: Device, backing: Box<dyn SegmentBacking>) -> Self {
        Self::with_config(device, backing, AllocatorConfig::FIXED)
    }

    /// An empty allocator for `device` configured by `config`, whose memory comes from
    /// `backing`; expandable segments use the page sizes of `device`'s target.
    pub fn with_config(device: Device, backing: Box<dyn SegmentBacking>, config: AllocatorConfig) -> Self {
        let target = device.target();
        CachingAllocator {
            device,
            backing,
            pages: config.expandable_segments.then(|| {
                [
                    expandable_page_bytes(target, PoolKind::Small),
                    expandable_page_bytes(target, PoolKind::Large),
                ]
            }),
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            next_serial: 0,
            free: [FreeSet::new(), FreeSet::new()],
            unmapped: [UnmappedSet::new(), UnmappedSet::new()],
            reserved: 0,
            reserve_limit: None,
        }
    }

    /// The configuration this allocator was made with.
    pub fn config(&self) -> AllocatorConfig {
        AllocatorConfig {
            expandable_segments: self.pages.is_some(),
        }
    }

    /// Bounds the bytes reserved (held in segments, or mapped into expandable ranges), as a
    /// device of `limit` bytes would (`None`: no bound, the default). Memory that would pass the
    /// limit first makes the allocator release its cache ([`CachingAllocator::empty_cache`]) and
    /// try again, as PyTorch's allocator does when `cudaMalloc` fails; when live blocks alone
    /// leave no room the request fails with [`CoreError::ReserveLimit`]. The rule is arithmetic
    /// on sizes only, so Meta replays it exactly: a plan checked on Meta under a limit runs
    /// under it on the device.
    pub fn set_reserve_limit(&mut self, limit: Option<u64>) {
        self.reserve_limit = limit;
    }

    /// The reserve limit in bytes, if one is set.
    pub fn reserve_limit(&self) -> Option<u64> {
        self.reserve_limit
    }

    /// Whether `bytes` more would pass the reserve limit.
    fn over_limit(&self, bytes: u64) -> bool {
        self.reserve_limit
            .is_some_and(|limit| self.reserved.checked_add(bytes).is_none_or(|r| r > limit))
    }

    /// The reserve-limit refusal of `request` bytes that needed `more` reserved bytes.
    fn refusal(&self, request: u64, more: u64) -> CoreError {
        CoreError::ReserveLimit {
            device: self.device,
            bytes: request,
            segment_bytes: more,
            reserved: self.reserved,
            limit: self.reserve_limit.unwrap_or(u64::MAX),
        }
    }

    /// Bytes reserved now: held in segments, or mapped into expandable ranges.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Segments held now (an expandable range counts as one).
    pub fn segment_count(&self) -> usize {
        self.segments.iter().flatten().count()
    }

    /// The most reserved bytes a request of `rounded` bytes can add: its new segment, or the
    /// pages that cover it; `None` when that overflows.
    pub fn most_new_reserved(&self, rounded: u64) -> Option<u64> {
        match self.pages {
            None => segment_size(rounded),
            Some(pages) => round_to_page(rounded, pages[PoolKind::for_size(rounded).index()]),
        }
    }

    /// The size in bytes a request of `bytes` would be granted if a free block of exactly that
    /// size existed: `bytes` rounded. An error when the rounding overflows.
    pub fn rounded(&self, bytes: u64) -> Result<u64> {
        round_size(bytes).ok_or(CoreError::OutOfMemory {
            device: self.device,
            bytes,
        })
    }

    fn block(&self, id: usize) -> &Block {
        // Invariant: ids held in free and unmapped sets, neighbour links and handed-out
        // BlockIds always name live slab entries (entries are vacated only after every link to
        // them is gone).
        self.blocks[id].as_ref().expect("live block")
    }

    fn block_mut(&mut self, id: usize) -> &mut Block {
        self.blocks[id].as_mut().expect("live block")
    }

    fn segment(&self, id: usize) -> &Segment {
        let seg = self.block(id).segment;
        self.segments[seg].as_ref().expect("live segment")
    }

    fn free_key(&self, id: usize) -> (u64, u64, u64, usize) {
        let b = self.block(id);
        (b.size, self.segment(id).serial, b.offset, id)
    }

    fn unmapped_key(&self, id: usize) -> (u64, u64, usize) {
        (self.segment(id).serial, self.block(id).offset, id)
    }

    fn pool_of(&self, id: usize) -> PoolKind {
        self.segment(id).pool
    }

    /// Puts a block that is in no set into the set its state says: free or unmapped.
    fn file(&mut self, id: usize) {
        let pool = self.pool_of(id).index();
        if self.block(id).mapped {
            let key = self.free_key(id);
            self.free[pool].insert(key);
        } else {
            let key = self.unmapped_key(id);
            self.unmapped[pool].insert(key);
        }
    }

    /// Takes a free or unmapped block out of its set (before its size or offset changes).
    fn unfile(&mut self, id: usize) {
        let pool = self.pool_of(id).index();
        if self.block(id).mapped {
            let key = self.free_key(id);
            self.free[pool].remove(&key);
        } else {
            let key = self.unmapped_key(id);
            self.unmapped[pool].remove(&key);
        }
    }

    fn insert_block(&mut self, block: Block) -> usize {
        slab_insert(&mut self.blocks, &mut self.vacant_blocks, block)
    }

    fn remove_block(&mut self, id: usize) -> Block {
        self.vacant_blocks.push(id);
        self.blocks[id].take().expect("live block")
    }

    /// A new block right after `id` in its segment, of `size` bytes, linked in (in no set).
    fn insert_after(&mut self, id: usize, size: u64, mapped: bool, zeroed: bool) -> usize {
        let (segment, offset, next) = {
            let b = self.block(id);
            (b.segment, b.offset + b.size, b.next)
        };
        let new = self.insert_block(Block {
            segment,
            offset,
            size,
            allocated: false,
            mapped,
            zeroed,
            prev: Some(id),
            next,
        });
        if let Some(n) = next {
            self.block_mut(n).prev = Some(new);
        }
        self.block_mut(id).next = Some(new);
        new
    }

    /// Merges neighbour `src` of `dst` into `dst` when it is in the same state (free and
    /// mapped, or unmapped); `dst` must be in no set. Returns whether it merged.
    fn absorb(&mut self, dst: usize, src: Option<usize>) -> bool {
        let Some(src) = src else { return false };
        let (d, s) = (self.block(dst), self.block(src));
        if s.allocated || d.mapped != s.mapped {
            return false;
        }
        self.unfile(src);
        let n = self.remove_block(src);
        let b = self.block_mut(dst);
        b.size += n.size;
        b.zeroed &= n.zeroed;
        if n.offset < b.offset {
            b.offset = n.offset;
            b.prev = n.prev;
            if let Some(p) = n.prev {
                self.block_mut(p).next = Some(dst);
            }
        } else {
            b.next = n.next;
            if let Some(nx) = n.next {
                self.block_mut(nx).prev = Some(dst);
            }
        }
        true
    }

    fn insert_segment(&mut self, segment: Segment) -> usize {
        self.next_serial += 1;
        slab_insert(&mut self.segments, &mut self.vacant_segments, segment)
    }

    /// A new fixed segment of `bytes` bytes for `pool`, as one free block (not yet in a set).
    fn reserve_segment(&mut self, pool: PoolKind, bytes: u64, request: u64) -> Result<usize> {
        if self.over_limit(bytes) {
            self.empty_cache();
            if self.over_limit(bytes) {
                return Err(self.refusal(request, bytes));
            }
        }
        let memory = match self.backing.reserve(bytes) {
            Ok(m) => m,
            // Like PyTorch, give the cached free segments back and try once more.
            Err(CoreError::OutOfMemory { .. }) if self.empty_cache() > 0 => self.backing.reserve(bytes)?,
            Err(e) => return Err(e),
        };
        let seg = self.insert_segment(Segment {
            serial: self.next_serial,
            bytes,
            pool,
            page: None,
            memory,
        });
        self.reserved += bytes;
        Ok(self.insert_block(Block {
            segment: seg,
            offset: 0,
            size: bytes,
            allocated: false,
            mapped: true,
            zeroed: true,
            prev: None,
            next: None,
        }))
    }

    /// The cached free block a request of `size` bytes in `pool` takes (PyTorch
    /// `get_free_block`): the smallest that fits. With expandable segments a block's room is its
    /// size plus the unmapped block right after it: from the smallest that fits, the search
    /// walks on in size order while the next block's room is smaller, so the free block at a
    /// range's growing end is taken last.
    fn find_free(&self, pool: PoolKind, size: u64) -> Option<usize> {
        let mut fits = self.free[pool.index()].range((size, 0, 0, 0)..);
        let first = fits.next()?.3;
        if self.pages.is_none() {
            return Some(first);
        }
        let room = |id: usize| {
            let b = self.block(id);
            b.size
                + b.next.map_or(0, |n| {
                    if self.block(n).mapped {
                        0
                    } else {
                        self.block(n).size
                    }
                })
        };
        let (mut best, mut best_room) = (first, room(first));
        for &(.., id) in fits {
            let r = room(id);
            if r >= best_room {
                break;
            }
            (best, best_room) = (id, r);
        }
        Some(best)
    }

    /// A block for a request of `bytes` bytes: the best cached free block of the request's pool
    /// (`get_free_block` in [`super::rules`]), else new memory (a segment, or pages of an
    /// expandable range); split when the rules say so. An error when the backing cannot provide
    /// the memory even after releasing the cache, the reserve limit refuses it, or the size
    /// overflows.
    pub fn malloc(&mut self, bytes: u64) -> Result<Grant> {
        let size = self.rounded(bytes)?;
        if size == 0 {
            return Ok(Grant {
                block: None,
                size: 0,
                memory: None,
                zeroed: true,
            });
        }
        let pool = PoolKind::for_size(size);
        let id = match self.find_free(pool, size) {
            Some(id) => {
                self.unfile(id);
                id
            }
            None if self.pages.is_some() => self.grow(pool, size, bytes)?,
            None => {
                let seg_bytes = segment_size(size).ok_or(CoreError::OutOfMemory {
                    device: self.device,
                    bytes,
                })?;
                self.reserve_segment(pool, seg_bytes, bytes)?
            }
        };
        let block_size = self.block(id).size;
        if should_split(pool, block_size, size, self.pages.is_some()) {
            let zeroed = self.block(id).zeroed;
            self.block_mut(id).size = size;
            let rest = self.insert_after(id, block_size - size, true, zeroed);
            self.file(rest);
        }
        let b = self.block_mut(id);
        b.allocated = true;
        let (size, offset, zeroed) = (b.size, b.offset, b.zeroed);
        b.zeroed = false;
        let memory = self.segment(id).memory.clone().map(|m| (m, offset));
        Ok(Grant {
            block: Some(BlockId(id)),
            size,
            memory,
            zeroed,
        })
    }

    /// Gives a block back: it merges with free neighbours in its segment and becomes free for
    /// reuse. Its memory stays reserved until [`CachingAllocator::empty_cache`].
    pub fn free(&mut self, block: BlockId) {
        let id = block.0;
        debug_assert!(self.block(id).allocated, "block {id} freed twice");
        self.block_mut(id).allocated = false;
        let (prev, next) = (self.block(id).prev, self.block(id).next);
        self.absorb(id, prev);
        self.absorb(id, next);
        self.file(id);
    }

    /// Releases every fixed segment that holds no allocated block and unmaps the whole free
    /// pages of expandable ranges, releasing a range with nothing left mapped (PyTorch
    /// `empty_cache`). Returns the reserved bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        let mut released = 0;
        for pool in [PoolKind::Small, PoolKind::Large] {
            let free: Vec<usize> = self.free[pool.index()].iter().map(|k| k.3).collect();
            for id in free {
                if self.segment(id).page.is_some() {
                    released += self.unmap_free(id);
                    continue;
                }
                let b = self.block(id);
                if b.prev.is_some() || b.next.is_some() {
                    continue;
                }
                self.unfile(id);
                let b = self.remove_block(id);
                let seg = self.segments[b.segment].take().expect("live segment");
                self.vacant_segments.push(b.segment);
                self.reserved -= seg.bytes;
                released += seg.bytes;
            }
        }
        released
    }
}

/// Puts `item` in a vacant slot of `slab` (or a new one) and returns its index.
fn slab_insert<T>(slab: &mut Vec<Option<T>>, vacant: &mut Vec<usize>, item: T) -> usize {
    match vacant.pop() {
        Some(i) => {
            slab[i] = Some(item);
            i
        }
        None => {
            slab.push(Some(item));
            slab.len() - 1
        }
    }
}

#[cfg(test)]
mod tests;
