//! Tracked storage: the bytes behind a tensor, on one device, registered with its tracker.

mod cpu;
mod cuda;
mod element;

pub use cpu::CpuData;
pub use cuda::{CudaData, cuda_context, cuda_device_count};
pub use element::Element;

use crate::memory::{Allocation, MemoryKind, MemoryTracker};
use crate::{CoreError, DType, Device, Result};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The data of a storage: typed host memory, nothing (Meta), or device memory.
#[derive(Debug)]
pub enum StorageData {
    /// Host memory.
    Cpu(CpuData),
    /// No data: a Meta storage has a size but no bytes.
    Meta,
    /// GPU memory.
    Cuda(CudaData),
}

/// One tracked buffer of `len` elements of `dtype` on `device`. Its allocation is recorded by the
/// device's tracker when it is created and its free when it is dropped.
#[derive(Debug)]
pub struct Storage {
    dtype: DType,
    len: usize,
    device: Device,
    data: RwLock<StorageData>,
    // Declared last so that the data is released before the free is recorded.
    allocation: Allocation,
}

impl Storage {
    /// Bytes needed for `len` elements of `dtype`.
    pub fn bytes_for(dtype: DType, len: usize) -> u64 {
        (len * dtype.size_in_bytes()) as u64
    }

    /// A zero-filled storage (no data on Meta). An error when `len` elements of `dtype` exceed
    /// the address space, or when the host is out of memory.
    pub fn zeros(dtype: DType, len: usize, device: Device, kind: MemoryKind) -> Result<Storage> {
        if len
            .checked_mul(dtype.size_in_bytes())
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(CoreError::invalid(
                "Storage::zeros",
                format!(
                    "{len} elements of {dtype} exceed the address space ({} bytes at most)",
                    isize::MAX
                ),
            ));
        }
        let data = match device {
            Device::Cpu => StorageData::Cpu(CpuData::zeros(dtype, len)?),
            Device::Meta(_) => StorageData::Meta,
            Device::Cuda(ordinal) => StorageData::Cuda(CudaData::zeros(ordinal, dtype, len)?),
        };
        Ok(Self::from_parts(data, dtype, len, device, kind))
    }

    /// Wraps host data; records the allocation on the CPU tracker.
    pub fn from_cpu(data: CpuData, kind: MemoryKind) -> Storage {
        let (dtype, len) = (data.dtype(), data.len());
        Self::from_parts(StorageData::Cpu(data), dtype, len, Device::Cpu, kind)
    }

    /// Wraps device memory of GPU `ordinal` (e.g. the output of a CUDA kernel) and records its
    /// allocation on that GPU's tracker. The data must have been allocated on that GPU.
    pub fn from_cuda(data: CudaData, ordinal: usize, kind: MemoryKind) -> Storage {
        let (dtype, len) = (data.dtype(), data.len());
        Self::from_parts(StorageData::Cuda(data), dtype, len, Device::Cuda(ordinal), kind)
    }

    /// Wraps data already on `device` and records its allocation. `data` must match `device`.
    pub(crate) fn from_parts(
        data: StorageData,
        dtype: DType,
        len: usize,
        device: Device,
        kind: MemoryKind,
    ) -> Storage {
        let allocation = MemoryTracker::current(device).allocate(Self::bytes_for(dtype, len), kind);
        Storage {
            dtype,
            len,
            device,
            data: RwLock::new(data),
            allocation,
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the storage holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.allocation.bytes()
    }

    /// Device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The tracker entry.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// Shared access to the data.
    pub fn read(&self) -> RwLockReadGuard<'_, StorageData> {
        // Kernels never panic while holding the lock, so poisoning cannot leave torn data.
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive access to the data (in-place kernels).
    pub fn write(&self) -> RwLockWriteGuard<'_, StorageData> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive access without locking, for storage not yet shared.
    pub(crate) fn data_mut(&mut self) -> &mut StorageData {
        self.data.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}
