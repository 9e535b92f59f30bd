//! Block and segment bookkeeping of the caching allocator: best-fit search, splitting,
//! coalescing and `empty_cache`, independent of what memory (if any) stands behind a segment.

use super::backing::{SegmentBacking, SegmentMemory};
use super::rules::{PoolKind, round_size, segment_size, should_split};
use crate::{CoreError, Device, Result};
use std::collections::BTreeSet;
use std::sync::Arc;

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
    /// Whether every byte of the block is known to be zero (never handed out since its segment
    /// was reserved), so a zero-filled buffer needs no fill.
    pub zeroed: bool,
}

#[derive(Debug)]
struct Block {
    segment: usize,
    offset: u64,
    size: u64,
    allocated: bool,
    zeroed: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(Debug)]
struct Segment {
    serial: u64,
    bytes: u64,
    pool: PoolKind,
    memory: Option<Arc<dyn SegmentMemory>>,
}

/// Free blocks of one pool, ordered for best fit: size, then segment age, then offset.
type FreeSet = BTreeSet<(u64, u64, u64, usize)>;

/// Device-agnostic caching allocator in the manner of PyTorch's CUDA caching allocator (rules in
/// [`super::rules`]): requests are rounded, served best-fit from cached free blocks of their
/// pool, split when the remainder is worth keeping, coalesced with free neighbours when freed,
/// and new segments are reserved from the backing only when no free block fits. Segments are
/// kept until [`CachingAllocator::empty_cache`]. The arithmetic never depends on addresses, so
/// Meta (no backing) and the CPU (host backing) make identical decisions.
#[derive(Debug)]
pub struct CachingAllocator {
    device: Device,
    backing: Box<dyn SegmentBacking>,
    blocks: Vec<Option<Block>>,
    vacant_blocks: Vec<usize>,
    segments: Vec<Option<Segment>>,
    vacant_segments: Vec<usize>,
    next_serial: u64,
    free: [FreeSet; 2],
    reserved: u64,
    reserve_limit: Option<u64>,
}

impl CachingAllocator {
    /// An empty allocator for `device` whose segments come from `backing`.
    pub fn new(device: Device, backing: Box<dyn SegmentBacking>) -> Self {
        CachingAllocator {
            device,
            backing,
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            next_serial: 0,
            free: [FreeSet::new(), FreeSet::new()],
            reserved: 0,
            reserve_limit: None,
        }
    }

    /// Bounds the bytes held in segments, as a device of `limit` bytes would (`None`: no bound,
    /// the default). A new segment that would pass the limit first makes the allocator release
    /// every cached free segment and try again, as PyTorch's allocator does when `cudaMalloc`
    /// fails; when the live segments alone leave no room the request fails with
    /// [`CoreError::ReserveLimit`]. The rule is arithmetic on sizes only, so Meta replays it
    /// exactly: a plan checked on Meta under a limit runs under it on the device.
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

    /// Bytes held in segments now.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Segments held now.
    pub fn segment_count(&self) -> usize {
        self.segments.iter().flatten().count()
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
        // Invariant: ids held in free sets, neighbour links and handed-out BlockIds always
        // name live slab entries (entries are vacated only after every link to them is gone).
        self.blocks[id].as_ref().expect("live block")
    }

    fn block_mut(&mut self, id: usize) -> &mut Block {
        self.blocks[id].as_mut().expect("live block")
    }

    fn free_key(&self, id: usize) -> (u64, u64, u64, usize) {
        let b = self.block(id);
        let serial = self.segments[b.segment].as_ref().map_or(0, |s| s.serial);
        (b.size, serial, b.offset, id)
    }

    fn pool_of(&self, id: usize) -> PoolKind {
        let seg = self.block(id).segment;
        self.segments[seg].as_ref().map_or(PoolKind::Large, |s| s.pool)
    }

    fn insert_block(&mut self, block: Block) -> usize {
        match self.vacant_blocks.pop() {
            Some(i) => {
                self.blocks[i] = Some(block);
                i
            }
            None => {
                self.blocks.push(Some(block));
                self.blocks.len() - 1
            }
        }
    }

    fn remove_block(&mut self, id: usize) -> Block {
        self.vacant_blocks.push(id);
        self.blocks[id].take().expect("live block")
    }

    /// A new segment of `bytes` bytes for `pool`, as one free block (not yet in a free set).
    fn reserve_segment(&mut self, pool: PoolKind, bytes: u64, request: u64) -> Result<usize> {
        if let Some(limit) = self.reserve_limit
            && self.over_limit(bytes)
        {
            self.empty_cache();
            if self.over_limit(bytes) {
                return Err(CoreError::ReserveLimit {
                    device: self.device,
                    bytes: request,
                    segment_bytes: bytes,
                    reserved: self.reserved,
                    limit,
                });
            }
        }
        let memory = match self.backing.reserve(bytes) {
            Ok(m) => m,
            // Like PyTorch, give the cached free segments back and try once more.
            Err(CoreError::OutOfMemory { .. }) if self.empty_cache() > 0 => self.backing.reserve(bytes)?,
            Err(e) => return Err(e),
        };
        let segment = Segment {
            serial: self.next_serial,
            bytes,
            pool,
            memory,
        };
        self.next_serial += 1;
        let seg = match self.vacant_segments.pop() {
            Some(i) => {
                self.segments[i] = Some(segment);
                i
            }
            None => {
                self.segments.push(Some(segment));
                self.segments.len() - 1
            }
        };
        self.reserved += bytes;
        Ok(self.insert_block(Block {
            segment: seg,
            offset: 0,
            size: bytes,
            allocated: false,
            zeroed: true,
            prev: None,
            next: None,
        }))
    }

    /// A block for a request of `bytes` bytes: the smallest cached free block of the request's
    /// pool that fits, else a new segment; split when the rules say so. An error when the
    /// backing cannot provide a segment even after releasing the cache, or the size overflows.
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
        let found = self.free[pool.index()].range((size, 0, 0, 0)..).next().copied();
        let id = match found {
            Some(key) => {
                self.free[pool.index()].remove(&key);
                key.3
            }
            None => {
                let seg_bytes = segment_size(size).ok_or(CoreError::OutOfMemory {
                    device: self.device,
                    bytes,
                })?;
                self.reserve_segment(pool, seg_bytes, bytes)?
            }
        };
        let block_size = self.block(id).size;
        if should_split(pool, block_size, size) {
            let (segment, offset, zeroed, next) = {
                let b = self.block(id);
                (b.segment, b.offset, b.zeroed, b.next)
            };
            let rest = self.insert_block(Block {
                segment,
                offset: offset + size,
                size: block_size - size,
                allocated: false,
                zeroed,
                prev: Some(id),
                next,
            });
            if let Some(n) = next {
                self.block_mut(n).prev = Some(rest);
            }
            let b = self.block_mut(id);
            b.size = size;
            b.next = Some(rest);
            let key = self.free_key(rest);
            self.free[pool.index()].insert(key);
        }
        let b = self.block_mut(id);
        b.allocated = true;
        let (size, offset, zeroed, seg) = (b.size, b.offset, b.zeroed, b.segment);
        b.zeroed = false;
        let memory = self.segments[seg]
            .as_ref()
            .and_then(|s| s.memory.clone())
            .map(|m| (m, offset));
        Ok(Grant {
            block: Some(BlockId(id)),
            size,
            memory,
            zeroed,
        })
    }

    /// Gives a block back: it merges with free neighbours in its segment and becomes free for
    /// reuse. The segment stays reserved until [`CachingAllocator::empty_cache`].
    pub fn free(&mut self, block: BlockId) {
        let id = block.0;
        let pool = self.pool_of(id);
        self.block_mut(id).allocated = false;
        for neighbour in [self.block(id).prev, self.block(id).next].into_iter().flatten() {
            if self.block(neighbour).allocated {
                continue;
            }
            let key = self.free_key(neighbour);
            self.free[pool.index()].remove(&key);
            let n = self.remove_block(neighbour);
            let b = self.block_mut(id);
            b.size += n.size;
            b.zeroed &= n.zeroed;
            if n.offset < b.offset {
                b.offset = n.offset;
                b.prev = n.prev;
                if let Some(p) = n.prev {
                    self.block_mut(p).next = Some(id);
                }
            } else {
                b.next = n.next;
                if let Some(nx) = n.next {
                    self.block_mut(nx).prev = Some(id);
                }
            }
        }
        let key = self.free_key(id);
        self.free[pool.index()].insert(key);
    }

    /// Releases every segment that holds no allocated block (PyTorch `empty_cache`) and returns
    /// the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        let mut released = 0;
        for pool in [PoolKind::Small, PoolKind::Large] {
            let whole: Vec<_> = self.free[pool.index()]
                .iter()
                .filter(|k| {
                    let b = self.block(k.3);
                    b.prev.is_none() && b.next.is_none()
                })
                .copied()
                .collect();
            for key in whole {
                self.free[pool.index()].remove(&key);
                let b = self.remove_block(key.3);
                let seg = self.segments[b.segment].take().expect("live segment");
                self.vacant_segments.push(b.segment);
                self.reserved -= seg.bytes;
                released += seg.bytes;
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::super::backing::NoBacking;
    use super::super::rules::{LARGE_BUFFER, SMALL_BUFFER};
    use super::*;

    fn meta() -> CachingAllocator {
        CachingAllocator::new(Device::META, Box::new(NoBacking))
    }

    #[test]
    fn small_requests_share_a_small_segment_and_coalesce_back() {
        let mut a = meta();
        let x = a.malloc(100).unwrap();
        let y = a.malloc(600).unwrap();
        assert_eq!((x.size, y.size), (512, 1024));
        assert_eq!(a.reserved(), SMALL_BUFFER);
        assert!(x.zeroed && y.zeroed);
        a.free(x.block.unwrap());
        // best fit: the 512 B hole is reused, and it is no longer known to be zero
        let z = a.malloc(1).unwrap();
        assert_eq!(z.block, x.block);
        assert!(!z.zeroed);
        a.free(z.block.unwrap());
        a.free(y.block.unwrap());
        assert_eq!(a.segment_count(), 1);
        assert_eq!(a.empty_cache(), SMALL_BUFFER);
        assert_eq!((a.reserved(), a.segment_count()), (0, 0));
    }

    #[test]
    fn large_requests_split_only_past_a_mebibyte_and_big_ones_get_their_own_segment() {
        let mut a = meta();
        let x = a.malloc(3 << 20).unwrap();
        assert_eq!(a.reserved(), LARGE_BUFFER);
        // 20 - 3 = 17 MiB remain: split; 17 MiB - 16.5 MiB = 0.5 MiB: not split
        let y = a.malloc((33 << 20) / 2).unwrap();
        assert_eq!(y.size, 17 << 20);
        assert_eq!(a.reserved(), LARGE_BUFFER);
        // an own 12 MiB segment; the 1 MiB - 512 B left is too small to split off
        let big = a.malloc((11 << 20) + 1).unwrap();
        assert_eq!(big.size, 12 << 20);
        assert_eq!(a.reserved(), LARGE_BUFFER + (12 << 20));
        a.free(big.block.unwrap());
        a.free(x.block.unwrap());
        assert_eq!(a.empty_cache(), 12 << 20);
        a.free(y.block.unwrap());
        assert_eq!(a.empty_cache(), LARGE_BUFFER);
        assert_eq!(a.malloc(0).unwrap().size, 0);
        assert_eq!(a.reserved(), 0);
    }

    #[test]
    fn a_reserve_limit_releases_the_cache_then_refuses() {
        let mut a = meta();
        a.set_reserve_limit(Some(40 << 20));
        // 12 MiB requests get own-size segments
        let x = a.malloc(12 << 20).unwrap();
        let y = a.malloc(12 << 20).unwrap();
        assert_eq!(a.reserved(), 24 << 20);
        a.free(x.block.unwrap());
        // 25 MiB fits no cached block; a 26 MiB segment would pass the limit, so the cached
        // segment of x is released first and the new one fits
        let z = a.malloc(25 << 20).unwrap();
        assert_eq!(a.reserved(), 38 << 20);
        assert_eq!(a.segment_count(), 2);
        // without the limit the cache would have been kept
        let mut unbounded = meta();
        let x2 = unbounded.malloc(12 << 20).unwrap();
        let _y2 = unbounded.malloc(12 << 20).unwrap();
        unbounded.free(x2.block.unwrap());
        let _z2 = unbounded.malloc(25 << 20).unwrap();
        assert_eq!(unbounded.reserved(), 50 << 20);
        // live segments alone leave no room: a clear error, nothing changed
        let err = a.malloc(30 << 20).unwrap_err();
        assert!(err.is_out_of_memory());
        let msg = err.to_string();
        assert!(msg.contains("reserve limit of 41943040 bytes"), "{msg}");
        assert_eq!(a.reserved(), 38 << 20);
        a.free(y.block.unwrap());
        a.free(z.block.unwrap());
        a.set_reserve_limit(None);
        assert_eq!(a.reserve_limit(), None);
        assert!(a.malloc(30 << 20).is_ok());
    }

    #[test]
    fn random_traffic_keeps_segments_tiled_and_reserved_consistent() {
        let mut a = meta();
        let mut live = Vec::new();
        let mut state = 0x9e3779b97f4a7c15u64;
        for step in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if live.len() < 40 && (!state.is_multiple_of(3) || live.is_empty()) {
                let bytes = match state % 4 {
                    0 => state % 4096,
                    1 => state % (1 << 20),
                    2 => state % (8 << 20),
                    _ => state % (24 << 20),
                };
                live.push(a.malloc(bytes).unwrap());
            } else {
                let g = live.swap_remove((state as usize / 3) % live.len());
                if let Some(b) = g.block {
                    a.free(b);
                }
            }
            if step % 500 == 0 {
                a.empty_cache();
            }
            // every segment is tiled by its blocks, in order, without gaps
            let mut tiled = 0;
            for (i, b) in a.blocks.iter().enumerate() {
                let Some(b) = b else { continue };
                if b.prev.is_none() {
                    let mut end = 0;
                    let mut cur = Some(i);
                    while let Some(c) = cur {
                        let cb = a.block(c);
                        assert_eq!(cb.offset, end);
                        end += cb.size;
                        cur = cb.next;
                    }
                    assert_eq!(end, a.segments[b.segment].as_ref().unwrap().bytes);
                    tiled += end;
                }
            }
            assert_eq!(tiled, a.reserved());
            let held: u64 = live.iter().map(|g| g.size).sum();
            assert!(held <= a.reserved());
        }
    }
}
