//! The second stream of each GPU: uploads that overlap the compute stream's work. Work on it
//! is ordered against the compute stream ([`super::stream`]) by events only, in both
//! directions: an upload starts after the compute work queued before it (its block may have
//! been freed by kernels still queued), and the compute stream waits for the upload before the
//! first kernel that reads its tensor.

use crate::storage::{cuda_context, per_gpu};
use crate::{CoreError, Result};
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::{Arc, Mutex};

/// GPU `ordinal`'s copy stream: a non-blocking stream of its own, created on first use.
pub fn copy_stream(ordinal: usize) -> Result<Arc<CudaStream>> {
    static STREAMS: Mutex<Vec<Option<Arc<CudaStream>>>> = Mutex::new(Vec::new());
    let ctx = cuda_context(ordinal)?;
    per_gpu(&STREAMS, ordinal, || {
        ctx.new_stream().map_err(|e| CoreError::Cuda {
            op: "creating the GPU's copy stream",
            message: e.to_string(),
        })
    })
}

/// Makes `copy` wait for everything queued on GPU `ordinal`'s compute stream so far.
pub(crate) fn after_compute(ordinal: usize, copy: &CudaStream) -> Result<()> {
    const OP: &str = "ordering an upload after the compute stream";
    let err = |e: cudarc::driver::DriverError| CoreError::Cuda {
        op: OP,
        message: e.to_string(),
    };
    let queued = super::stream(ordinal)?.record_event(None).map_err(err)?;
    copy.wait(&queued).map_err(err)
}

/// Makes GPU `ordinal`'s compute stream wait for `done` (a GPU-side wait: the host goes on).
pub(crate) fn compute_waits_for(ordinal: usize, done: &CudaEvent) -> Result<()> {
    super::stream(ordinal)?.wait(done).map_err(|e| CoreError::Cuda {
        op: "ordering the compute stream after an upload",
        message: e.to_string(),
    })
}
