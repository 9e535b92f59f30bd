//! Expandable host ranges for the CPU's caching allocator: address space reserved with no
//! access and no memory behind it, pages made writable and faulted in as the pool grows
//! (`mprotect`, `MADV_POPULATE_WRITE`) and given back to the system by `empty_cache`
//! (`MADV_DONTNEED`, then no access again).

use super::host_segment::map_anonymous;
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
        let (ptr, bytes) = map_anonymous(bytes, libc::PROT_NONE, libc::MAP_NORESERVE)?;
        Ok(HostRange { ptr, bytes })
    }

    /// The part `offset..offset + bytes` of the range, checked to lie inside it in whole
    /// system pages.
    fn part(&self, offset: u64, bytes: u64) -> Option<(*mut libc::c_void, usize)> {
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(bytes).ok()?;
        // SAFETY: sysconf has no preconditions.
        let system_page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let aligned =
            system_page > 0 && offset.is_multiple_of(system_page) && len.is_multiple_of(system_page);
        if len == 0 || !aligned || offset.checked_add(len)? > self.bytes {
            return None;
        }
        // SAFETY: `offset + len <= self.bytes`, so the pointer stays inside the mapping.
        Some((unsafe { self.ptr.as_ptr().add(offset) }.cast(), len))
    }
}

/// Faults in `len` bytes at `addr`, made writable just before: one `MADV_POPULATE_WRITE`
/// (Linux 5.14+), or a write per system page on kernels without it. Whether it succeeded.
///
/// # Safety
/// `addr..addr + len` must be readable and writable memory of this process that no one else
/// reads or writes now, all zero.
unsafe fn populate(addr: *mut libc::c_void, len: usize) -> bool {
    // SAFETY: the caller's range; the advice only faults pages in.
    if unsafe { libc::madvise(addr, len, libc::MADV_POPULATE_WRITE) } == 0 {
        return true;
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return false;
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    for at in (0..len).step_by(page) {
        // SAFETY: inside the caller's writable range; writes the zero already there.
        unsafe { std::ptr::write_volatile(addr.cast::<u8>().add(at), 0) };
    }
    true
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
        let oom = CoreError::OutOfMemory {
            device: Device::Cpu,
            bytes,
        };
        let Some((addr, len)) = self.part(offset, bytes) else {
            return Err(oom);
        };
        // Reserved pages become readable and writable in place (mprotect never leaves a hole in
        // the range, unlike a failed MAP_FIXED remap), then are faulted in now, as fixed
        // segments are, so steps after the first pay no page faults. They read as zero: never
        // touched, or discarded by `unmap_pages`.
        // SAFETY: `addr..addr + len` lies inside this range (checked by `part`), and the
        // allocator maps only pages no block covers.
        let writable = unsafe { libc::mprotect(addr, len, libc::PROT_READ | libc::PROT_WRITE) } == 0;
        // SAFETY: as above; the pages are writable, unused and zero.
        if writable && unsafe { populate(addr, len) } {
            return Ok(());
        }
        self.unmap_pages(offset, bytes);
        Err(oom)
    }

    fn unmap_pages(&self, offset: u64, bytes: u64) {
        let Some((addr, len)) = self.part(offset, bytes) else {
            debug_assert!(
                false,
                "unmap_pages({offset}, {bytes}) outside the range's whole pages"
            );
            return;
        };
        // The pages' memory goes back to the system (they read as zero when mapped again) and
        // the range keeps the address space, with no access. Neither call can leave a hole.
        // SAFETY: inside this range (checked by `part`); the allocator unmaps only pages no live
        // block covers, so nothing reads what is discarded.
        unsafe {
            libc::madvise(addr, len, libc::MADV_DONTNEED);
            libc::mprotect(addr, len, libc::PROT_NONE);
        }
    }
}
