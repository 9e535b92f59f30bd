//! Page-locked host memory of one GPU: what asynchronous uploads copy from. The driver reads it
//! by DMA while the host goes on, so an upload from it can overlap a training step; the buffer
//! remembers its last upload and waits for it before the host writes into it again.

use super::cuda_context;
use crate::{CoreError, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};
use std::sync::Arc;

/// `len` elements of `T` in page-locked host memory of GPU `ordinal`'s context
/// (`cuMemHostAlloc`). Fill it with [`PinnedBuffer::host_mut`]; upload it with
/// [`crate::Tensor::upload_pinned`].
#[derive(Debug)]
pub struct PinnedBuffer<T: DeviceRepr> {
    slice: PinnedHostSlice<T>,
    ordinal: usize,
    /// Recorded on the copy stream after the last upload that read this buffer (shared with
    /// the uploaded tensor, which the compute stream waits for with it).
    last_upload: Option<Arc<CudaEvent>>,
}

fn driver_error(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CoreError {
    move |e| CoreError::Cuda {
        op,
        message: e.to_string(),
    }
}

impl<T: DeviceRepr + ValidAsZeroBits> PinnedBuffer<T> {
    /// `len` elements (at least 1) of page-locked memory for GPU `ordinal`, zero-filled. An
    /// error when `len` is 0 or too large, when the GPU or its driver is missing, or when the
    /// host cannot lock `len` elements.
    pub fn new(ordinal: usize, len: usize) -> Result<Self> {
        const OP: &str = "allocating page-locked host memory (cuMemHostAlloc)";
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize);
        if bytes.is_none() {
            return Err(CoreError::invalid(
                OP,
                format!("{len} elements exceed the address space"),
            ));
        }
        if len == 0 {
            // cudarc treats the null pointer of an empty allocation as a bug and panics.
            return Err(CoreError::invalid(
                OP,
                "a buffer of 0 elements: ask for at least 1",
            ));
        }
        let ctx = cuda_context(ordinal)?;
        // SAFETY: the memory is zero-filled below, before anything reads it; every `T` here is
        // plain bits (`ValidAsZeroBits`), so zero bytes are a valid value.
        let mut slice = unsafe { ctx.alloc_pinned_with_flags::<T>(len, 0) }.map_err(driver_error(OP))?;
        let host = slice.as_mut_slice().map_err(driver_error(OP))?;
        // SAFETY: `host` is `len` elements of `T` this buffer owns; all-zero bits are valid.
        unsafe { std::ptr::write_bytes(host.as_mut_ptr(), 0, len) };
        Ok(PinnedBuffer {
            slice,
            ordinal,
            last_upload: None,
        })
    }

    /// The GPU whose context holds the memory.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The elements, for the host to write, after waiting until the last upload from them
    /// has read them (a host wait on that upload only, not on the GPU's other work).
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        self.wait_for_upload()?;
        self.slice
            .as_mut_slice()
            .map_err(driver_error("writing page-locked host memory"))
    }

    fn wait_for_upload(&mut self) -> Result<()> {
        if let Some(e) = self.last_upload.take() {
            e.synchronize()
                .map_err(driver_error("waiting for an upload from page-locked memory"))?;
        }
        Ok(())
    }

    /// Queues a copy of the first `len` elements to device address `dst` on `copy` and
    /// remembers it, so that the host waits for it before writing here again. Returns the
    /// event recorded after the copy.
    ///
    /// # Safety
    /// `dst` must address at least `len` elements of `T` that nothing else reads or writes
    /// until the copy has completed on `copy`.
    pub(crate) unsafe fn copy_to_device(
        &mut self,
        dst: u64,
        len: usize,
        copy: &CudaStream,
    ) -> Result<Arc<CudaEvent>> {
        const OP: &str = "uploading from page-locked memory (cuMemcpyHtoDAsync)";
        if len > self.len() {
            return Err(CoreError::invalid(
                OP,
                format!("{len} elements asked of a buffer of {}", self.len()),
            ));
        }
        self.wait_for_upload()?;
        let host = self.slice.as_slice().map_err(driver_error(OP))?;
        // SAFETY: `host[..len]` is page-locked memory this buffer keeps alive until the event
        // recorded below has completed (`wait_for_upload` before any write or drop); the caller
        // guarantees `dst`.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, &host[..len], copy.cu_stream()) }
            .map_err(driver_error(OP))?;
        // The host waits on this event (a blocking wait, not a spin) before writing here again.
        match copy.record_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC)) {
            Ok(e) => {
                let e = Arc::new(e);
                self.last_upload = Some(e.clone());
                Ok(e)
            }
            Err(e) => {
                // Without the event nothing would keep the buffer (or the block written) until
                // the copy has read it.
                let _ = copy.synchronize();
                Err(driver_error(OP)(e))
            }
        }
    }
}

impl<T: DeviceRepr> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // The memory must outlive the DMA reading it; a failed wait leaves nothing better to do.
        if let Some(e) = self.last_upload.take() {
            let _ = e.synchronize();
        }
    }
}

impl super::Storage {
    /// A storage on `src`'s GPU (a block of its caching allocator, allocated now, on the
    /// calling thread's tracker) into which the first `len` elements of `src` are being
    /// copied on the GPU's copy stream, after the compute work queued so far. Returns it with
    /// the event after which it holds the values (`None` for 0 elements): nothing may read it
    /// on the compute stream before that stream waits for the event.
    pub(crate) fn upload_pinned<T: DeviceRepr + ValidAsZeroBits + super::Element>(
        src: &mut PinnedBuffer<T>,
        len: usize,
        kind: crate::MemoryKind,
    ) -> Result<(super::Storage, Option<Arc<CudaEvent>>)> {
        let ordinal = src.ordinal();
        let copy = crate::cuda::copy_stream(ordinal)?;
        let mut done = None;
        let storage = Self::gpu(T::DTYPE, len, ordinal, kind, |data, _| {
            if len == 0 {
                return Ok(());
            }
            // The block may have been freed by kernels still queued on the compute stream (and
            // a fresh segment is zeroed there): the copy starts after them.
            crate::cuda::after_compute(ordinal, &copy)?;
            // SAFETY: `data` is this new storage's block of `len` elements of `T`, which nothing
            // else can reach until the storage is handed out, and the caller orders every read
            // after `done`.
            done = Some(unsafe { src.copy_to_device(data.device_ptr(), len, &copy)? });
            Ok(())
        })?;
        Ok((storage, done))
    }
}
