//! The GPU's memory after real steps, split into memopt's pool and everything outside it
//! (CUDA context, loaded kernel modules, cuBLAS handles, other processes), as `profile` and
//! `train` report it on `--device cuda[:N]`.

use crate::error::Result;
use crate::format::bytes;
use memopt_core::{Device, MemoryTracker};
use serde::Serialize;

/// GPU memory figures, in bytes, measured with `cuMemGetInfo` after the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuMemory {
    /// Memory the GPU has.
    pub total_bytes: u64,
    /// Memory in use on the GPU (total - free), every process included.
    pub used_bytes: u64,
    /// Of that, the segments memopt's caching allocator holds now (this thread's tracker).
    pub pool_reserved_bytes: u64,
    /// Used memory outside the pool: the CUDA context, kernel modules, cuBLAS handles and
    /// workspace, and other processes on the GPU.
    pub outside_pool_bytes: u64,
}

impl GpuMemory {
    /// The figures of `device` now, with `tracker` the tracker whose pool holds the steps'
    /// segments; `None` off the GPU.
    pub fn measure(device: Device, tracker: &MemoryTracker) -> Result<Option<GpuMemory>> {
        let Device::Cuda(ordinal) = device else {
            return Ok(None);
        };
        let m = memopt_core::cuda::device_memory(ordinal)?;
        let reserved = tracker.reserved_bytes();
        Ok(Some(GpuMemory {
            total_bytes: m.total_bytes,
            used_bytes: m.used_bytes(),
            pool_reserved_bytes: reserved,
            outside_pool_bytes: m.outside_pool_bytes(reserved),
        }))
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        format!(
            "GPU memory (cuMemGetInfo): {} used of {}; memopt's pool reserves {}, outside the \
             pool {} ({} bytes: CUDA context, kernel modules, cuBLAS, other processes)",
            bytes(self.used_bytes),
            bytes(self.total_bytes),
            bytes(self.pool_reserved_bytes),
            bytes(self.outside_pool_bytes),
            self.outside_pool_bytes
        )
    }
}
