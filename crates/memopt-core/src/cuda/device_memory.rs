//! How much memory a GPU has and how much of it is free, from the driver (`cuMemGetInfo`), and
//! the part of the used memory that memopt's caching allocator does not hold.

use crate::storage::cuda_context;
use crate::{CoreError, Result};

/// Free and total memory of one GPU, in bytes, as the driver reports them (`cuMemGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// GPU ordinal.
    pub ordinal: usize,
    /// Bytes free on the GPU now (for every process on it).
    pub free_bytes: u64,
    /// Bytes of memory the GPU has.
    pub total_bytes: u64,
}

impl DeviceMemory {
    /// Bytes in use on the GPU now (every process and context on it), `total - free`.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.free_bytes)
    }

    /// Bytes in use that are not segments of memopt's caching allocator: this process's CUDA
    /// context, loaded modules, cuBLAS handles and anything other processes hold, given the
    /// bytes `reserved` in the allocator's segments on this GPU. Zero if `reserved` exceeds
    /// what the driver counts as used (a figure taken at another moment).
    pub fn outside_pool_bytes(&self, reserved: u64) -> u64 {
        self.used_bytes().saturating_sub(reserved)
    }
}

/// The free and total memory of GPU `ordinal` (creating its context if needed, which itself
/// takes memory: measure after the context exists for figures that exclude nothing). An error
/// when CUDA is unavailable, the GPU does not exist, or the driver call fails.
pub fn device_memory(ordinal: usize) -> Result<DeviceMemory> {
    let ctx = cuda_context(ordinal)?;
    let (free, total) = ctx.mem_get_info().map_err(|e| CoreError::Cuda {
        op: "reading the free GPU memory (cuMemGetInfo)",
        message: e.to_string(),
    })?;
    Ok(DeviceMemory {
        ordinal,
        free_bytes: free as u64,
        total_bytes: total as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_pool_is_used_minus_reserved_and_never_wraps() {
        let m = DeviceMemory {
            ordinal: 0,
            free_bytes: 70 << 30,
            total_bytes: 80 << 30,
        };
        assert_eq!(m.used_bytes(), 10 << 30);
        assert_eq!(m.outside_pool_bytes(4 << 30), 6 << 30);
        assert_eq!(m.outside_pool_bytes(11 << 30), 0);
    }

    #[test]
    fn without_a_gpu_the_error_says_why() {
        if matches!(crate::cuda_device_count(), Ok(n) if n > 0) {
            let m = device_memory(0).unwrap();
            assert!(m.free_bytes <= m.total_bytes && m.total_bytes > 0, "{m:?}");
        } else {
            let e = device_memory(0).unwrap_err();
            assert!(
                matches!(
                    e,
                    CoreError::CudaUnavailable { .. } | CoreError::CudaDeviceNotFound { .. }
                ),
                "{e}"
            );
        }
    }
}
