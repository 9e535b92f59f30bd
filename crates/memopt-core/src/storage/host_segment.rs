//! Host segments for the CPU's caching allocator: anonymous private mappings, pre-faulted, so a
//! reserved byte is a resident byte and the step after a warm-up pays no page faults.

use super::HostRange;
use crate::memory::caching::rules::EXPANDABLE_RANGE_BYTES;
use crate::memory::caching::{SegmentBacking, SegmentMemory};
use crate::{CoreError, Device, Result};
use std::ptr::NonNull;
use std::sync::Arc;

/// One mapping of host memory; unmapped when the last handle drops.
#[derive(Debug)]
pub struct HostSegment {
    ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: the mapping is plain memory owned by this value; which bytes may be read or written
// through it is decided by the caching allocator's blocks, which never overlap.
unsafe impl Send for HostSegment {}
// SAFETY: as above; `HostSegment` itself never reads or writes the memory.
unsafe impl Sync for HostSegment {}

impl HostSegment {
    /// A zero-filled, pre-faulted mapping of `bytes` bytes, or `OutOfMemory`.
    pub fn map(bytes: u64) -> Result<HostSegment> {
        let (ptr, bytes) = map_anonymous(bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_POPULATE)?;
        Ok(HostSegment { ptr, bytes })
    }
}

/// A new anonymous private mapping of `bytes` bytes with protection `prot` and extra `flags`,
/// at an address the kernel picks; `OutOfMemory` when the size is not addressable or the
/// kernel refuses.
pub(super) fn map_anonymous(
    bytes: u64,
    prot: libc::c_int,
    flags: libc::c_int,
) -> Result<(NonNull<u8>, usize)> {
    let oom = CoreError::OutOfMemory {
        device: Device::Cpu,
        bytes,
    };
    let len = usize::try_from(bytes).map_err(|_| oom.clone())?;
    if len == 0 || len > isize::MAX as usize {
        return Err(oom);
    }
    // SAFETY: an anonymous private mapping at an address the kernel picks touches no existing
    // memory; the result is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(oom);
    }
    Ok((NonNull::new(ptr.cast::<u8>()).ok_or(oom)?, len))
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`bytes` are exactly the mapping created in `map`, unmapped once here;
        // no block of it is alive (blocks keep their segment alive through an `Arc`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.bytes);
        }
    }
}

impl SegmentMemory for HostSegment {
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
}

/// The CPU tracker's backing: every fixed segment is a [`HostSegment`], every expandable range
/// a [`HostRange`].
#[derive(Debug, Default, Clone, Copy)]
pub struct HostBacking;

impl SegmentBacking for HostBacking {
    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        Ok(Some(Arc::new(HostSegment::map(bytes)?)))
    }

    fn reserve_range(&mut self, bytes: u64, page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        // SAFETY: sysconf has no preconditions.
        let system_page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if system_page <= 0 || !page.is_multiple_of(system_page as u64) {
            return Err(CoreError::invalid(
                "expandable segments",
                format!(
                    "a page of {page} bytes is not a multiple of the system's page size ({system_page} bytes)"
                ),
            ));
        }
        // A request larger than a whole range is simply out of memory; a range of the usual
        // size that cannot be reserved says why.
        let range = HostRange::reserve(bytes).map_err(|e| {
            if bytes > EXPANDABLE_RANGE_BYTES {
                return e;
            }
            CoreError::invalid(
                "expandable segments",
                format!(
                    "cannot reserve {bytes} bytes of address space for an expandable segment (is \
                     the process's address space limited, `ulimit -v`?); use \
                     --expandable-segments false or MEMOPT_ALLOC_CONF=expandable_segments:False"
                ),
            )
        })?;
        Ok(Some(Arc::new(range)))
    }
}
