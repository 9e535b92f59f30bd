//! GPU segments for a CUDA tracker's caching allocator: one `cuMemAlloc` per segment, zeroed
//! on the GPU's stream when reserved, freed with `cuMemFree` when the allocator releases it
//! (`empty_cache`, or the tracker's end).
//!
//! Decision: synchronous `cuMemAlloc`/`cuMemFree` rather than `cuMemAllocAsync`, as PyTorch's
//! caching allocator does with `cudaMalloc`: the driver's stream-ordered pool would cache freed
//! segments behind memopt's back, so `cuMemGetInfo` (the free-memory check, the outside-pool
//! figure) would no longer see what memopt's pool holds. Segments are reserved rarely (the pool
//! caches them), so the synchronisation a free needs costs nothing per step.

use super::CudaRange;
use crate::memory::caching::{SegmentBacking, SegmentMemory};
use crate::{CoreError, Device, Result};
use cudarc::driver::sys::{CUdeviceptr, cudaError_enum};
use cudarc::driver::{CudaStream, DriverError, result};
use std::sync::Arc;

/// One `cuMemAlloc` of GPU memory; freed when the last handle drops.
#[derive(Debug)]
pub struct CudaSegment {
    ptr: CUdeviceptr,
    bytes: u64,
    stream: Arc<CudaStream>,
}

impl CudaSegment {
    /// A zero-filled segment of `bytes` bytes on the GPU of `stream` (the GPU's one stream),
    /// or [`CoreError::OutOfMemory`] when the driver has no room for it.
    pub fn alloc(stream: &Arc<CudaStream>, ordinal: usize, bytes: u64) -> Result<CudaSegment> {
        let oom = CoreError::OutOfMemory {
            device: Device::Cuda(ordinal),
            bytes,
        };
        let len = usize::try_from(bytes).map_err(|_| oom.clone())?;
        if len == 0 {
            return Err(oom);
        }
        let driver = |op: &'static str| driver_error(ordinal, bytes, op);
        stream
            .context()
            .bind_to_thread()
            .map_err(driver("binding the CUDA context"))?;
        // SAFETY: a plain allocation of `len` > 0 bytes in the bound context; the memory is
        // zeroed below before any block of it is handed out.
        let ptr =
            unsafe { result::malloc_sync(len) }.map_err(driver("allocating a GPU segment (cuMemAlloc)"))?;
        let segment = CudaSegment {
            ptr,
            bytes,
            stream: stream.clone(),
        };
        // SAFETY: `ptr` holds `len` bytes (allocated above); the memset is queued on the GPU's
        // one stream, before any kernel that uses a block of the segment.
        unsafe { result::memset_d8_async(ptr, 0, len, stream.cu_stream()) }
            .map_err(driver("zeroing a GPU segment (cuMemsetD8Async)"))?;
        Ok(segment)
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Maps the error of driver call `op`, made for `bytes` bytes on GPU `ordinal`, to memopt's:
/// out of memory as such, anything else with what was done.
pub(super) fn driver_error(
    ordinal: usize,
    bytes: u64,
    op: &'static str,
) -> impl Fn(DriverError) -> CoreError {
    move |e: DriverError| match e.0 {
        cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => CoreError::OutOfMemory {
            device: Device::Cuda(ordinal),
            bytes,
        },
        _ => CoreError::Cuda {
            op,
            message: e.to_string(),
        },
    }
}

impl Drop for CudaSegment {
    fn drop(&mut self) {
        // Work queued on the stream may still use blocks of this segment (their buffers were
        // dropped after queueing it): finish it before giving the memory back. Errors cannot
        // be returned from a drop; the context records them and reports them on its next
        // checked call.
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        ctx.record_err(self.stream.synchronize());
        // SAFETY: `ptr` came from `cuMemAlloc` in `alloc` and is freed once, here, after the
        // stream that used it drained; no block of it is alive (blocks hold this segment).
        ctx.record_err(unsafe { result::free_sync(self.ptr) });
    }
}

impl SegmentMemory for CudaSegment {
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }

    fn device_ptr(&self) -> Option<u64> {
        Some(self.ptr)
    }
}

/// A CUDA tracker's backing: every fixed segment is a [`CudaSegment`], every expandable range a
/// [`CudaRange`], on GPU `ordinal`'s one stream.
/// Nothing touches the driver before the first segment is reserved, so a tracker for a GPU can
/// be created (and fail clearly at its first allocation) on a machine without one.
#[derive(Debug, Clone, Copy)]
pub struct CudaBacking {
    ordinal: usize,
}

impl CudaBacking {
    /// The backing of GPU `ordinal`.
    pub fn new(ordinal: usize) -> CudaBacking {
        CudaBacking { ordinal }
    }
}

impl SegmentBacking for CudaBacking {
    fn reserve(&mut self, bytes: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let stream = crate::cuda::stream(self.ordinal)?;
        Ok(Some(Arc::new(CudaSegment::alloc(&stream, self.ordinal, bytes)?)))
    }

    fn reserve_range(&mut self, bytes: u64, page: u64) -> Result<Option<Arc<dyn SegmentMemory>>> {
        let stream = crate::cuda::stream(self.ordinal)?;
        Ok(Some(Arc::new(CudaRange::reserve(
            &stream,
            self.ordinal,
            bytes,
            page,
        )?)))
    }
}
