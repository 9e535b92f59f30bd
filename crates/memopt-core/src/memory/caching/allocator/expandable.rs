//! Expandable segments (PyTorch's `expandable_segments:True`): each pool grows one address
//! range by mapping pages at the lowest address with room, instead of adding segments, and
//! `empty_cache` unmaps the whole free pages.

use super::{Block, CachingAllocator, PoolKind, Segment};
use crate::memory::caching::rules::{EXPANDABLE_RANGE_BYTES, round_to_page};
use crate::{CoreError, Result};

impl CachingAllocator {
    fn page_of(&self, id: usize) -> u64 {
        self.segment(id).page.expect("a block of an expandable range")
    }

    /// Where a request of `size` bytes grows `pool` (PyTorch `find_expandable_block`): the
    /// first unmapped block in address order, or the free block right before it, from which
    /// free and unmapped blocks in a row hold `size` bytes; `None` when no range has room.
    fn expandable_candidate(&self, pool: PoolKind, size: u64) -> Option<usize> {
        self.unmapped[pool.index()].iter().find_map(|&(.., id)| {
            let start = match self.block(id).prev {
                Some(p) if self.block(p).is_free() => p,
                _ => id,
            };
            let mut room = 0;
            let mut cur = Some(start);
            while let Some(c) = cur {
                let b = self.block(c);
                if room >= size || b.allocated {
                    break;
                }
                room += b.size;
                cur = b.next;
            }
            (room >= size).then_some(start)
        })
    }

    /// Bytes that mapping for a request of `size` bytes from `candidate` maps (`None`: a new
    /// range), as [`Self::map_for`] will map them.
    fn bytes_to_map(&self, pool: PoolKind, candidate: Option<usize>, size: u64) -> u64 {
        let Some(start) = candidate else {
            let page = self.pages.expect("expandable")[pool.index()];
            return round_to_page(size, page).unwrap_or(u64::MAX);
        };
        let (mut covered, mut mapped) = (0u64, 0u64);
        let mut cur = Some(start);
        while let Some(c) = cur {
            if covered >= size {
                break;
            }
            let b = self.block(c);
            if b.mapped {
                covered += b.size;
            } else {
                let m = self.page_span(c, size - covered);
                covered += m;
                mapped += m;
            }
            cur = b.next;
        }
        mapped
    }

    /// Bytes mapped to cover `want` bytes at the start of unmapped block `id`: whole pages, at
    /// most the block.
    fn page_span(&self, id: usize, want: u64) -> u64 {
        let size = self.block(id).size;
        round_to_page(want.min(size), self.page_of(id)).map_or(size, |m| m.min(size))
    }

    /// A free block of at least `size` bytes made by mapping pages into `pool`'s ranges (taken
    /// out of the free set); `request` is the caller's byte count, for errors. Like PyTorch, a
    /// refusal of the reserve limit or the backing first releases the cache and tries again.
    pub(super) fn grow(&mut self, pool: PoolKind, size: u64, request: u64) -> Result<usize> {
        let mut candidate = self.expandable_candidate(pool, size);
        let mut more = self.bytes_to_map(pool, candidate, size);
        if self.over_limit(more) {
            self.empty_cache();
            candidate = self.expandable_candidate(pool, size);
            more = self.bytes_to_map(pool, candidate, size);
            if self.over_limit(more) {
                return Err(self.refusal(request, more));
            }
        }
        match self.map_for(pool, candidate, size) {
            Err(CoreError::OutOfMemory { .. }) if self.empty_cache() > 0 => {
                let candidate = self.expandable_candidate(pool, size);
                self.map_for(pool, candidate, size)
            }
            other => other,
        }
    }

    /// Maps pages from `candidate` (a new range when `None`) until one free block holds `size`
    /// bytes (PyTorch `try_allocate_expandable_block`); returns it out of the free set.
    fn map_for(&mut self, pool: PoolKind, candidate: Option<usize>, size: u64) -> Result<usize> {
        let mut c = match candidate {
            Some(c) => c,
            None => {
                let range = self.new_range(pool, size)?;
                // A range nothing could be mapped into goes back at once.
                return match self.map_block(range, size) {
                    Ok(c) => self.finish_mapping(c, size),
                    Err(e) => {
                        self.release_if_empty(range);
                        Err(e)
                    }
                };
            }
        };
        if !self.block(c).mapped {
            c = self.map_block(c, size)?;
        }
        self.finish_mapping(c, size)
    }

    /// Maps the unmapped blocks after free block `c` until it holds `size` bytes; returns it out
    /// of the free set.
    fn finish_mapping(&mut self, mut c: usize, size: u64) -> Result<usize> {
        while self.block(c).size < size {
            let next = self.block(c).next.expect("room after the candidate");
            let want = size - self.block(c).size;
            c = self.map_block(next, want)?;
        }
        self.unfile(c);
        Ok(c)
    }

    /// A new range of `pool` with room for `size` bytes, as one unmapped block in the unmapped
    /// set: [`EXPANDABLE_RANGE_BYTES`] in whole pages, or `size` in whole pages when larger
    /// (so Meta counts any request; a device fails to reserve such a range).
    fn new_range(&mut self, pool: PoolKind, size: u64) -> Result<usize> {
        let page = self.pages.expect("expandable")[pool.index()];
        let bytes = round_to_page(size, page)
            .ok_or(CoreError::OutOfMemory {
                device: self.device,
                bytes: size,
            })?
            .max(EXPANDABLE_RANGE_BYTES / page * page);
        let memory = self.backing.reserve_range(bytes, page)?;
        let seg = self.insert_segment(Segment {
            serial: self.next_serial,
            bytes,
            pool,
            page: Some(page),
            memory,
        });
        let id = self.insert_block(Block {
            segment: seg,
            offset: 0,
            size: bytes,
            allocated: false,
            mapped: false,
            zeroed: false,
            prev: None,
            next: None,
        });
        self.file(id);
        Ok(id)
    }

    /// Maps the pages covering the first `want` bytes of unmapped block `id` (PyTorch
    /// `map_block`); the mapped part merges with free neighbours and joins the free set.
    /// Returns the merged free block. An error from the backing changes nothing.
    fn map_block(&mut self, id: usize, want: u64) -> Result<usize> {
        let bytes = self.page_span(id, want);
        let offset = self.block(id).offset;
        if let Some(memory) = &self.segment(id).memory {
            memory.map_pages(offset, bytes)?;
        }
        self.unfile(id);
        let rest = self.block(id).size - bytes;
        if rest > 0 {
            self.block_mut(id).size = bytes;
            let r = self.insert_after(id, rest, false, false);
            self.file(r);
        }
        let b = self.block_mut(id);
        b.mapped = true;
        b.zeroed = true;
        let (prev, next) = (b.prev, b.next);
        self.absorb(id, prev);
        self.absorb(id, next);
        self.file(id);
        self.reserved += bytes;
        Ok(id)
    }

    /// Unmaps the whole pages inside free block `id` of an expandable range (PyTorch
    /// `unmap_block`), keeping the partial pages at either end free and mapped; releases the
    /// range when nothing in it stays mapped. Returns the bytes unmapped.
    pub(super) fn unmap_free(&mut self, id: usize) -> u64 {
        let page = self.page_of(id);
        let (offset, size, zeroed) = {
            let b = self.block(id);
            (b.offset, b.size, b.zeroed)
        };
        let begin = offset.div_ceil(page) * page;
        let end = (offset + size) / page * page;
        if begin >= end {
            return 0;
        }
        if let Some(memory) = &self.segment(id).memory {
            memory.unmap_pages(begin, end - begin);
        }
        self.unfile(id);
        if end < offset + size {
            self.block_mut(id).size = end - offset;
            let after = self.insert_after(id, offset + size - end, true, zeroed);
            self.file(after);
        }
        if begin > offset {
            // The free head keeps this block's place; the unmapped middle is a new block after it.
            let head = id;
            self.block_mut(head).size = begin - offset;
            self.file(head);
            let middle = self.insert_after(head, end - begin, false, false);
            return self.settle_unmapped(middle, end - begin);
        }
        let b = self.block_mut(id);
        b.mapped = false;
        b.zeroed = false;
        self.settle_unmapped(id, end - begin)
    }

    /// Merges newly unmapped block `id` (in no set) with unmapped neighbours, files it, and
    /// releases its range when it spans all of it; returns `bytes`, the bytes it unmapped.
    fn settle_unmapped(&mut self, id: usize, bytes: u64) -> u64 {
        let (prev, next) = (self.block(id).prev, self.block(id).next);
        self.absorb(id, prev);
        self.absorb(id, next);
        self.reserved -= bytes;
        self.file(id);
        self.release_if_empty(id);
        bytes
    }

    /// Releases the range of unmapped block `id` (filed) when the block spans all of it.
    pub(super) fn release_if_empty(&mut self, id: usize) {
        let b = self.block(id);
        if b.mapped || b.prev.is_some() || b.next.is_some() {
            return;
        }
        self.unfile(id);
        let b = self.remove_block(id);
        self.segments[b.segment].take().expect("live segment");
        self.vacant_segments.push(b.segment);
    }
}
