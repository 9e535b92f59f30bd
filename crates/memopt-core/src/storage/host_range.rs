//! Expandable host ranges for the CPU's caching allocator: address space reserved with no
//! access and no memory behind it, pages committed (zero-filled, pre-faulted) as the pool grows
//! and given back to the system by `empty_cache`.

use crate::memory::caching::SegmentMemory;
use crate::{CoreError, Device, Result};
use std::ptr::NonNull;

/// One reserved range of host address space; unmapped whole when the last handle drops.
#[derive(Debug)]
pub struct HostRange {
    ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: the range is address space owned by this value; which committed bytes may be read or
// written through it is decided by the caching allocator's blocks, which never overlap.
unsafe impl Send for HostRange {}
// SAFETY: as above; mapping and unmapping only touch pages no live block covers.
unsafe impl Sync for HostRange {}

impl HostRange {
    /// A range of `bytes` bytes of address space with nothing committed (`PROT_NONE`,
    /// `MAP_NORESERVE`), or `OutOfMemory` when the system has no such range.
    pub fn reserve(bytes: u64) -> Result<HostRange> {
        let oom = CoreError::OutOfMemory {
            device: Device::Cpu,
            bytes,
        };
        let len = usize::try_from(bytes).map_err(|_| oom.clone())?;
        if len == 0 || len > isize::MAX as usize {
            return Err(oom);
        }
        // SAFETY: an anonymous private mapping at an address the kernel picks touches no
        // existing memory; the result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(oom);
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(oom)?;
        Ok(HostRange { ptr, bytes: len })
    }

    /// The part `offset..offset + bytes` of the range, checked to lie inside it.
    fn part(&self, offset: u64, bytes: u64) -> Option<(*mut libc::c_void, usize)> {
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(bytes).ok()?;
        if len == 0 || offset.checked_add(len)? > self.bytes {
            return None;
        }
        // SAFETY: `offset + len <= self.bytes`, so the pointer stays inside the mapping.
        Some((unsafe { self.ptr.as_ptr().add(offset) }.cast(), len))
    }

    /// Replaces the pages of `offset..offset + bytes` with a fresh anonymous mapping of `prot`;
    /// whether it succeeded.
    fn remap(&self, offset: u64, bytes: u64, prot: libc::c_int, flags: libc::c_int) -> bool {
        let Some((addr, len)) = self.part(offset, bytes) else {
            return false;
        };
        // SAFETY: `addr..addr + len` lies inside this value's own mapping (checked by `part`),
        // and the allocator maps or unmaps only pages no live block covers, so replacing them
        // with MAP_FIXED discards nothing anyone reads.
        let got = unsafe {
            libc::mmap(
                addr,
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | flags,
                -1,
                0,
            )
        };
        got == addr
    }
}

impl Drop for HostRange {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`bytes` are exactly the range reserved in `reserve`, unmapped once
        // here; no block of it is alive (blocks keep their range alive through an `Arc`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.bytes);
        }
    }
}

impl SegmentMemory for HostRange {
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }

    fn map_pages(&self, offset: u64, bytes: u64) -> Result<()> {
        // A fresh private mapping is zero-filled; MAP_POPULATE faults it in now, as fixed
        // segments are, so steps after the first pay no page faults.
        if self.remap(
            offset,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_POPULATE,
        ) {
            Ok(())
        } else {
            Err(CoreError::OutOfMemory {
                device: Device::Cpu,
                bytes,
            })
        }
    }

    fn unmap_pages(&self, offset: u64, bytes: u64) {
        // Back to reserved address space: the pages' memory goes back to the system. Should
        // the kernel refuse (it has no reason to for a range it already holds), the pages stay
        // committed and only the process's footprint is larger than reported.
        self.remap(offset, bytes, libc::PROT_NONE, libc::MAP_NORESERVE);
    }
}
