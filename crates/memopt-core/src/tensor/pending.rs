//! Tensors whose values are still on their way to a GPU: uploaded from page-locked memory on
//! the GPU's copy stream while the compute stream trains on the previous batch.

use super::Tensor;
use crate::memory::MemoryKind;
use crate::storage::{Element, PinnedBuffer, Storage};
use crate::{CoreError, Device, Result, Shape};
use cudarc::driver::{CudaEvent, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// A tensor being uploaded. Its memory is allocated (the tracker counts it from the upload's
/// start); [`PendingTensor::ready`] makes the compute stream wait for the upload and hands the
/// tensor out. On the CPU and Meta there is nothing to wait for.
#[derive(Debug)]
pub struct PendingTensor {
    tensor: Option<Tensor>,
    /// GPU and the event recorded after the upload, on a GPU.
    upload: Option<(usize, Arc<CudaEvent>)>,
}

impl PendingTensor {
    /// A tensor that is ready now (CPU or Meta data, or a finished upload).
    pub fn now(tensor: Tensor) -> Self {
        PendingTensor {
            tensor: Some(tensor),
            upload: None,
        }
    }

    /// Dimensions of the tensor.
    pub fn dims(&self) -> &[usize] {
        self.tensor.as_ref().map_or(&[], |t| t.dims())
    }

    /// The tensor, after ordering GPU work queued from now on after its upload.
    pub fn ready(mut self) -> Result<Tensor> {
        if let Some((ordinal, done)) = self.upload.take()
            && let Err(e) = crate::cuda::compute_waits_for(ordinal, &done)
        {
            // The tensor's block goes back to the pool with `self`: only after the upload.
            let _ = done.synchronize();
            return Err(e);
        }
        self.tensor
            .take()
            .ok_or_else(|| CoreError::invalid("PendingTensor::ready", "the tensor was taken already"))
    }
}

impl Drop for PendingTensor {
    fn drop(&mut self) {
        // Dropped without `ready` (a failed run): the block goes back to the pool, whose next
        // user runs on the compute stream, so that stream must come after the upload. A failed
        // wait leaves nothing better to do.
        if let Some((ordinal, done)) = self.upload.take() {
            let _ = crate::cuda::compute_waits_for(ordinal, &done);
        }
    }
}

impl Tensor {
    /// The first `shape`'s element count of `src`, uploaded to `src`'s GPU into a new tensor
    /// recorded with `kind` (allocated now, on the calling thread's tracker), copied on the
    /// GPU's copy stream after the compute work queued so far. `src` waits for the copy before
    /// the host writes into it again.
    pub fn upload_pinned<T: Element + DeviceRepr + ValidAsZeroBits>(
        src: &mut PinnedBuffer<T>,
        shape: impl Into<Shape>,
        kind: MemoryKind,
    ) -> Result<PendingTensor> {
        let shape = shape.into();
        let len = shape.elem_count_for("Tensor::upload_pinned")?;
        let (storage, done) = Storage::upload_pinned(src, len, kind)?;
        let upload = done.map(|e| (src.ordinal(), e));
        // Dropped on an error, the block returns to the pool: through `PendingTensor`'s drop,
        // which orders the compute stream after the upload.
        let mut pending = PendingTensor { tensor: None, upload };
        pending.tensor = Some(Tensor::from_storage(Arc::new(storage), shape)?);
        Ok(pending)
    }

    /// Overwrites this tensor's values (a whole view, `T` its dtype) with `values` in place:
    /// on a GPU a copy after the work queued before it, waited for; on Meta nothing (no data).
    /// Allocates nothing on the tensor's device.
    pub fn copy_from_host<T: Element + DeviceRepr>(&self, values: &[T]) -> Result<()> {
        const OP: &str = "copy_from_host";
        if values.len() != self.elem_count() {
            return Err(CoreError::shape(
                OP,
                format!("{} values for shape {}", self.elem_count(), self.shape()),
                format!("{} values", values.len()),
            ));
        }
        let mut w = self.write::<T>(OP)?;
        match self.device() {
            Device::Meta(_) => Ok(()),
            Device::Cpu => {
                w.host_mut()?.copy_from_slice(values);
                Ok(())
            }
            Device::Cuda(ordinal) if !values.is_empty() => {
                let dst = w.cuda_ptr()?;
                let stream = crate::cuda::stream(ordinal)?;
                let err = |e: cudarc::driver::DriverError| CoreError::Cuda {
                    op: "copying host values into a GPU tensor",
                    message: e.to_string(),
                };
                // The raw copy goes to the current context's legacy stream: make it this GPU's.
                stream.context().bind_to_thread().map_err(err)?;
                // SAFETY: `dst` addresses this view's `values.len()` elements of `T`, held
                // exclusively through `w`; the copy is queued on the compute stream after
                // every kernel queued before it, and waited for before `values` may go.
                unsafe { cudarc::driver::result::memcpy_htod_async(dst.0, values, stream.cu_stream()) }
                    .map_err(err)?;
                stream.synchronize().map_err(err)
            }
            Device::Cuda(_) => Ok(()),
        }
    }
}
