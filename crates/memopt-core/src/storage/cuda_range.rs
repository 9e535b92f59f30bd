//! Expandable GPU ranges for a CUDA tracker's caching allocator, as PyTorch's
//! `expandable_segments:True` makes them: address space reserved with `cuMemAddressReserve`,
//! one physical allocation per page (`cuMemCreate`) mapped with `cuMemMap` and made readable
//! and writable with `cuMemSetAccess` as the pool grows, unmapped and released by
//! `empty_cache`. New pages are zeroed on the GPU's stream before any block of them is used.

use super::cuda_segment::driver_error;
use crate::memory::caching::SegmentMemory;
use crate::{CoreError, Device, Result};
use cudarc::driver::sys::{
    self, CUdeviceptr, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationGranularity_flags,
    CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType,
};
use cudarc::driver::{CudaStream, result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One reserved range of GPU address space and the physical pages mapped into it; everything
/// unmapped, released and the range freed when the last handle drops.
#[derive(Debug)]
pub struct CudaRange {
    base: CUdeviceptr,
    bytes: u64,
    page: u64,
    ordinal: usize,
    stream: Arc<CudaStream>,
    /// The physical allocation mapped at each page index.
    pages: Mutex<BTreeMap<u64, CUmemGenericAllocationHandle>>,
}

/// Physical memory on GPU `ordinal`, pinned, without shareable handles.
fn device_memory(ordinal: usize) -> CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero bytes are valid (zero is each enum's
    // "invalid" or "none" value), then filled in below.
    let mut prop: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location(ordinal);
    prop
}

fn location(ordinal: usize) -> CUmemLocation {
    CUmemLocation {
        type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal as i32,
    }
}

impl CudaRange {
    /// A range of `bytes` bytes of address space on GPU `ordinal` with nothing mapped, whose
    /// pages are `page` bytes: an error when `page` is not a multiple of the GPU's allocation
    /// granularity, or the driver has no such range.
    pub fn reserve(stream: &Arc<CudaStream>, ordinal: usize, bytes: u64, page: u64) -> Result<CudaRange> {
        let len = usize::try_from(bytes).map_err(|_| CoreError::OutOfMemory {
            device: Device::Cuda(ordinal),
            bytes,
        })?;
        let err = |op: &'static str| driver_error(ordinal, bytes, op);
        stream
            .context()
            .bind_to_thread()
            .map_err(err("binding the CUDA context"))?;
        let prop = device_memory(ordinal);
        let mut granularity = 0usize;
        // SAFETY: `granularity` and `prop` are valid for the call's duration.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .result()
        .map_err(err(
            "asking the allocation granularity (cuMemGetAllocationGranularity)",
        ))?;
        if granularity == 0 || !page.is_multiple_of(granularity as u64) {
            return Err(CoreError::invalid(
                "expandable segments",
                format!(
                    "GPU {ordinal} maps memory in steps of {granularity} bytes, which do not divide \
                     the {page}-byte pages of memopt's CUDA target; use expandable_segments:False"
                ),
            ));
        }
        let mut base: CUdeviceptr = 0;
        // SAFETY: reserves address space only; `base` receives its start.
        unsafe { sys::cuMemAddressReserve(&mut base, len, 0, 0, 0) }
            .result()
            .map_err(err("reserving GPU address space (cuMemAddressReserve)"))?;
        Ok(CudaRange {
            base,
            bytes,
            page,
            ordinal,
            stream: stream.clone(),
            pages: Mutex::new(BTreeMap::new()),
        })
    }

    /// Unmaps and releases the pages in `first..end` that are mapped, recording failures in
    /// the context (reported by its next checked call).
    fn release(&self, pages: &mut BTreeMap<u64, CUmemGenericAllocationHandle>, first: u64, end: u64) {
        let ctx = self.stream.context();
        let held: Vec<u64> = pages.range(first..end).map(|(&i, _)| i).collect();
        for i in held {
            let handle = pages.remove(&i).expect("a held page");
            // SAFETY: page `i` is mapped at this address with this handle (recorded when it
            // was mapped), and no live block covers it; unmapped once, then released once.
            unsafe {
                ctx.record_err(sys::cuMemUnmap(self.base + i * self.page, self.page as usize).result());
                ctx.record_err(sys::cuMemRelease(handle).result());
            }
        }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, CUmemGenericAllocationHandle>> {
        self.pages.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for CudaRange {
    fn drop(&mut self) {
        // Work queued on the stream may still use pages of this range: finish it first.
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        ctx.record_err(self.stream.synchronize());
        let mut pages = std::mem::take(&mut *self.locked());
        self.release(&mut pages, 0, u64::MAX);
        // SAFETY: the range reserved in `reserve`, freed once, after every page was unmapped.
        ctx.record_err(unsafe { sys::cuMemAddressFree(self.base, self.bytes as usize) }.result());
    }
}

impl SegmentMemory for CudaRange {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    fn device_ptr(&self) -> Option<u64> {
        Some(self.base)
    }

    fn map_pages(&self, offset: u64, bytes: u64) -> Result<()> {
        let err = |op: &'static str| driver_error(self.ordinal, bytes, op);
        if !offset.is_multiple_of(self.page)
            || !bytes.is_multiple_of(self.page)
            || offset.checked_add(bytes).is_none_or(|e| e > self.bytes)
        {
            return Err(CoreError::invalid(
                "CudaRange::map_pages",
                format!(
                    "bytes {offset}..+{bytes} are not whole {}-byte pages of a {}-byte range",
                    self.page, self.bytes
                ),
            ));
        }
        self.stream
            .context()
            .bind_to_thread()
            .map_err(err("binding the CUDA context"))?;
        let prop = device_memory(self.ordinal);
        let (first, end) = (offset / self.page, (offset + bytes) / self.page);
        let mut pages = self.locked();
        for i in first..end {
            let mut handle: CUmemGenericAllocationHandle = 0;
            // SAFETY: creates one physical allocation of a page; `handle` receives it.
            let created = unsafe { sys::cuMemCreate(&mut handle, self.page as usize, &prop, 0) }.result();
            // SAFETY: maps the new allocation at page `i`, inside this range and not mapped yet
            // (the allocator maps only unmapped pages).
            let mapped = created.and_then(|()| {
                unsafe { sys::cuMemMap(self.base + i * self.page, self.page as usize, 0, handle, 0) }
                    .result()
                    .inspect_err(|_| {
                        // SAFETY: the allocation just created, never mapped, released once.
                        let _ = unsafe { sys::cuMemRelease(handle) };
                    })
            });
            if let Err(e) = mapped {
                self.release(&mut pages, first, i);
                return Err(err("mapping GPU memory (cuMemCreate, cuMemMap)")(e));
            }
            pages.insert(i, handle);
        }
        let access = CUmemAccessDesc {
            location: location(self.ordinal),
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `offset..offset + bytes` was mapped above; one access descriptor.
        let granted = unsafe { sys::cuMemSetAccess(self.base + offset, bytes as usize, &access, 1) }.result();
        // SAFETY: the pages are mapped and writable; the memset is queued on the GPU's one
        // stream, before any kernel that uses a block of them.
        let zeroed = granted.and_then(|()| unsafe {
            result::memset_d8_async(self.base + offset, 0, bytes as usize, self.stream.cu_stream())
        });
        if let Err(e) = zeroed {
            self.release(&mut pages, first, end);
            return Err(err(
                "making mapped GPU memory accessible and zeroing it (cuMemSetAccess, cuMemsetD8Async)",
            )(e));
        }
        Ok(())
    }

    fn unmap_pages(&self, offset: u64, bytes: u64) {
        let whole = offset.is_multiple_of(self.page)
            && bytes.is_multiple_of(self.page)
            && offset.checked_add(bytes).is_some_and(|e| e <= self.bytes);
        if !whole {
            debug_assert!(
                false,
                "unmap_pages({offset}, {bytes}) outside the range's whole pages"
            );
            return;
        }
        // Like cudaFree, and unlike cuMemUnmap, kernels queued on the stream must not find the
        // pages gone: drain it first (PyTorch does the same).
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        ctx.record_err(self.stream.synchronize());
        let mut pages = self.locked();
        self.release(
            &mut pages,
            offset / self.page,
            (offset + bytes).div_ceil(self.page),
        );
    }
}
