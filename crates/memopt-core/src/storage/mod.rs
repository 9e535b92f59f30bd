//! Tracked storage: the bytes behind a tensor, on one device, registered with its tracker.

mod cpu;
mod cuda;
mod cuda_range;
mod cuda_segment;
mod device_slice;
mod element;
mod host_buf;
mod host_range;
mod host_segment;
mod pinned;

pub use cpu::CpuData;
pub(crate) use cuda::per_gpu;
pub use cuda::{CudaData, cuda_context, cuda_device_count};
pub use cuda_range::CudaRange;
pub use cuda_segment::{CudaBacking, CudaSegment};
pub use device_slice::DeviceSlice;
pub use element::Element;
pub use host_buf::HostBuf;
pub use host_range::HostRange;
pub use host_segment::{HostBacking, HostSegment};
pub use pinned::PinnedBuffer;

use crate::memory::{Allocation, HostBlock, MemoryKind, MemoryTracker};
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

    /// A zero-filled storage (no data on Meta). On the CPU and on a GPU its bytes are a block
    /// of the device tracker's caching allocator, zero-filled unless the block is fresh from
    /// the system (on a GPU with `cuMemsetD8Async`). An error when `len` elements of `dtype`
    /// exceed the address space, or when the device is out of memory
    /// ([`CoreError::CudaOutOfMemory`] on a GPU).
    pub fn zeros(dtype: DType, len: usize, device: Device, kind: MemoryKind) -> Result<Storage> {
        Self::new(dtype, len, device, kind, true)
    }

    /// A storage its user overwrites entirely before reading it (no data on Meta). On the CPU
    /// and on a GPU its block is not zero-filled: it holds zeros (fresh from the system) or
    /// values earlier tensors wrote, never uninitialised memory (segments start zeroed and only
    /// plain values are ever written into them). Errors as [`Storage::zeros`].
    pub fn for_overwrite(dtype: DType, len: usize, device: Device, kind: MemoryKind) -> Result<Storage> {
        Self::new(dtype, len, device, kind, false)
    }

    fn new(dtype: DType, len: usize, device: Device, kind: MemoryKind, zero: bool) -> Result<Storage> {
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
            Device::Cpu => {
                return Self::host(dtype, len, kind, |block| match block {
                    Some(block) if zero => CpuData::zeros_in(dtype, len, block),
                    Some(block) => CpuData::as_is_in(dtype, len, block),
                    None => CpuData::from_empty(dtype),
                });
            }
            Device::Meta(_) => StorageData::Meta,
            Device::Cuda(ordinal) => {
                return Self::gpu(dtype, len, ordinal, kind, |data, fresh| match zero && !fresh {
                    true => data.fill_zero(),
                    false => Ok(()),
                });
            }
        };
        Self::from_parts(data, dtype, len, device, kind)
    }

    /// A storage on GPU `ordinal` whose bytes are a block of that GPU tracker's caching
    /// allocator, prepared by `fill` (given the data and whether the block is known to be all
    /// zero). A failed `fill` gives the block back and records the free.
    fn gpu(
        dtype: DType,
        len: usize,
        ordinal: usize,
        kind: MemoryKind,
        fill: impl FnOnce(&mut CudaData, bool) -> Result<()>,
    ) -> Result<Storage> {
        let device = Device::Cuda(ordinal);
        let tracker = MemoryTracker::current(device);
        let (allocation, block) = tracker.allocate_device(Self::bytes_for(dtype, len), kind)?;
        let fresh = block.as_ref().is_none_or(|b| b.is_zeroed());
        let mut data = CudaData::in_block(ordinal, dtype, len, block)?;
        fill(&mut data, fresh)?;
        Ok(Storage {
            dtype,
            len,
            device,
            data: RwLock::new(StorageData::Cuda(data)),
            allocation,
        })
    }

    /// A storage on GPU `ordinal` holding a copy of host `data`, in a block of that GPU's
    /// caching allocator. An error when the GPU is out of memory or the copy fails.
    pub fn upload(data: &CpuData, ordinal: usize, kind: MemoryKind) -> Result<Storage> {
        Self::gpu(data.dtype(), data.len(), ordinal, kind, |gpu, _| {
            gpu.upload_into(data)
        })
    }

    /// A CPU storage whose data `fill` builds in its caching-allocator block (`None` for an
    /// empty storage).
    fn host(
        dtype: DType,
        len: usize,
        kind: MemoryKind,
        fill: impl FnOnce(Option<HostBlock>) -> CpuData,
    ) -> Result<Storage> {
        let tracker = MemoryTracker::current(Device::Cpu);
        let (allocation, block) = tracker.allocate_host(Self::bytes_for(dtype, len), kind)?;
        Ok(Storage {
            dtype,
            len,
            device: Device::Cpu,
            data: RwLock::new(StorageData::Cpu(fill(block))),
            allocation,
        })
    }

    /// A CPU storage holding a copy of `data` in a block of the CPU caching allocator; records
    /// the allocation on the CPU tracker. An error when the host is out of memory.
    pub fn from_cpu(data: &CpuData, kind: MemoryKind) -> Result<Storage> {
        let (dtype, len) = (data.dtype(), data.len());
        Self::host(dtype, len, kind, |block| match block {
            Some(block) => data.copied_in(block),
            None => CpuData::from_empty(dtype),
        })
    }

    /// Wraps Meta data (none) on `device` and records its allocation. CPU and GPU data live in
    /// blocks of their tracker's allocator: see [`Storage::from_cpu`] and [`Storage::upload`].
    pub(crate) fn from_parts(
        data: StorageData,
        dtype: DType,
        len: usize,
        device: Device,
        kind: MemoryKind,
    ) -> Result<Storage> {
        let allocation = MemoryTracker::current(device).allocate(Self::bytes_for(dtype, len), kind)?;
        Ok(Storage {
            dtype,
            len,
            device,
            data: RwLock::new(data),
            allocation,
        })
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

    /// Size in bytes, as requested.
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
