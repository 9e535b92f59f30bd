//! Typed access to tensor data for kernels: host slices inside the CPU backend's half of an op,
//! device addresses ([`CudaPtr`]) inside its CUDA half.
//!
//! An op reads its inputs with [`Tensor::read`], allocates its outputs and workspace with
//! [`KernelBuffer`] (in the same order on every device, so Meta and CPU record identical event
//! streams), then runs its compute through [`crate::backend::launch`]; only the CPU half asks
//! for slices ([`DataRead::host`], [`KernelBuffer::host_mut`]), so "no data" (Meta) and "data on
//! a GPU" can never be mistaken for each other.

use super::Tensor;
use crate::backend::Init;
use crate::cuda::CudaPtr;
use crate::memory::MemoryKind;
use crate::storage::{Element, Storage, StorageData};
use crate::{CoreError, Device, Result, Shape};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

/// The slice of host data `range` of `data`, or the error of asking a device without host data.
fn host_slice<'a, T: Element>(
    op: &'static str,
    device: Device,
    data: &'a StorageData,
    range: Range<usize>,
) -> Result<&'a [T]> {
    match data {
        StorageData::Cpu(d) => T::slice(d)
            .map(|s| &s[range])
            .ok_or_else(|| wrong_dtype::<T>(op, d)),
        _ => Err(CoreError::NoData { op, device }),
    }
}

fn host_slice_mut<'a, T: Element>(
    op: &'static str,
    device: Device,
    data: &'a mut StorageData,
    range: Range<usize>,
) -> Result<&'a mut [T]> {
    match data {
        StorageData::Cpu(d) => {
            let dtype = d.dtype();
            T::slice_mut(d)
                .map(|s| &mut s[range])
                .ok_or(CoreError::DTypeMismatch {
                    op,
                    expected: T::DTYPE,
                    got: dtype,
                    hint: String::new(),
                })
        }
        _ => Err(CoreError::NoData { op, device }),
    }
}

/// The device address of element `start` of `data` (elements of `T`), or the error of asking
/// data that is not on a GPU or not of dtype `T`.
fn device_ptr<T: Element>(
    op: &'static str,
    device: Device,
    data: &StorageData,
    start: usize,
) -> Result<CudaPtr> {
    match data {
        StorageData::Cuda(d) if d.dtype() == T::DTYPE => {
            // `start` lies inside an allocation of at most isize::MAX bytes (Storage::new
            // checks), so the byte offset cannot overflow.
            let bytes = (start * T::DTYPE.size_in_bytes()) as u64;
            Ok(CudaPtr(d.device_ptr() + bytes))
        }
        StorageData::Cuda(d) => Err(CoreError::DTypeMismatch {
            op,
            expected: T::DTYPE,
            got: d.dtype(),
            hint: String::new(),
        }),
        _ => Err(CoreError::NotOnGpu { op, device }),
    }
}

fn wrong_dtype<T: Element>(op: &'static str, d: &crate::storage::CpuData) -> CoreError {
    CoreError::DTypeMismatch {
        op,
        expected: T::DTYPE,
        got: d.dtype(),
        hint: String::new(),
    }
}

/// Read access to a tensor's elements of type `T`.
pub struct DataRead<'a, T: Element> {
    guard: RwLockReadGuard<'a, StorageData>,
    range: Range<usize>,
    op: &'static str,
    device: Device,
    _t: PhantomData<T>,
}

impl<T: Element> DataRead<'_, T> {
    /// The elements in host memory, for the CPU half of an op; [`CoreError::NoData`] on Meta
    /// or on a GPU.
    pub fn host(&self) -> Result<&[T]> {
        host_slice(self.op, self.device, &self.guard, self.range.clone())
    }

    /// The device address of the view's first element, for the CUDA half of an op;
    /// [`CoreError::NotOnGpu`] on the CPU or Meta. Valid while `self` is held.
    pub fn cuda_ptr(&self) -> Result<CudaPtr> {
        device_ptr::<T>(self.op, self.device, &self.guard, self.range.start)
    }
}

/// Write access to a tensor's elements of type `T` (in-place kernels).
pub struct DataWrite<'a, T: Element> {
    guard: RwLockWriteGuard<'a, StorageData>,
    range: Range<usize>,
    op: &'static str,
    device: Device,
    _t: PhantomData<T>,
}

impl<T: Element> DataWrite<'_, T> {
    /// The elements in host memory, for the CPU half of an op; [`CoreError::NoData`] on Meta
    /// or on a GPU.
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        host_slice_mut(self.op, self.device, &mut self.guard, self.range.clone())
    }

    /// The device address of the view's first element, for the CUDA half of an op (which may
    /// write through it); [`CoreError::NotOnGpu`] on the CPU or Meta. Valid while `self` is held.
    pub fn cuda_ptr(&mut self) -> Result<CudaPtr> {
        device_ptr::<T>(self.op, self.device, &self.guard, self.range.start)
    }
}

impl Tensor {
    fn range(&self) -> Range<usize> {
        self.0.offset..self.0.offset + self.elem_count()
    }

    /// Reads the elements as `T` for op `op` (checks the dtype).
    pub fn read<T: Element>(&self, op: &'static str) -> Result<DataRead<'_, T>> {
        self.expect_materialised(op)?;
        self.expect_dtype(op, T::DTYPE)?;
        Ok(DataRead {
            guard: self.0.storage.read(),
            range: self.range(),
            op,
            device: self.device(),
            _t: PhantomData,
        })
    }

    /// Writes the elements in place as `T` for op `op` (checks the dtype). Holding this while
    /// reading a tensor that shares its storage would deadlock: in-place ops check
    /// [`Tensor::same_storage`] first.
    pub fn write<T: Element>(&self, op: &'static str) -> Result<DataWrite<'_, T>> {
        self.expect_materialised(op)?;
        self.expect_dtype(op, T::DTYPE)?;
        Ok(DataWrite {
            guard: self.0.storage.write(),
            range: self.range(),
            op,
            device: self.device(),
            _t: PhantomData,
        })
    }
}

/// A freshly allocated, tracked buffer owned by an op: an output (turned into a tensor with
/// [`KernelBuffer::into_tensor`]) or workspace (dropped when done, which records its free).
/// This is the one allocation path of every op; each buffer declares its [`Init`].
pub struct KernelBuffer<T: Element> {
    storage: Storage,
    op: &'static str,
    init: Init,
    _t: PhantomData<T>,
}

impl<T: Element> KernelBuffer<T> {
    /// `len` elements on `device` for op `op`, recorded with `kind`, starting as `init` says:
    /// zero-filled for [`Init::Zeroed`]; on the CPU and on a GPU, an [`Init::Overwritten`]
    /// buffer is a recycled block as it is (stale values, never uninitialised memory). No data
    /// on Meta.
    pub fn new(op: &'static str, device: Device, len: usize, kind: MemoryKind, init: Init) -> Result<Self> {
        let storage = match init {
            Init::Zeroed => Storage::zeros(T::DTYPE, len, device, kind)?,
            Init::Overwritten => Storage::for_overwrite(T::DTYPE, len, device, kind)?,
        };
        Ok(KernelBuffer {
            storage,
            op,
            init,
            _t: PhantomData,
        })
    }

    /// Workspace of `len` elements (kind [`MemoryKind::Workspace`]).
    pub fn workspace(op: &'static str, device: Device, len: usize, init: Init) -> Result<Self> {
        Self::new(op, device, len, MemoryKind::Workspace, init)
    }

    /// Whether the buffer was declared to start zeroed or to be overwritten.
    pub fn init(&self) -> Init {
        self.init
    }

    /// The elements in host memory, for the CPU half of an op; [`CoreError::NoData`] on Meta
    /// or on a GPU.
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        let (op, device, len) = (self.op, self.storage.device(), self.storage.len());
        host_slice_mut(op, device, self.storage.data_mut(), 0..len)
    }

    /// The device address of the first element, for the CUDA half of an op;
    /// [`CoreError::NotOnGpu`] on the CPU or Meta. Valid while `self` is held.
    pub fn cuda_ptr(&mut self) -> Result<CudaPtr> {
        let (op, device) = (self.op, self.storage.device());
        device_ptr::<T>(op, device, self.storage.data_mut(), 0)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.storage.len()
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
    }

    /// The buffer as a tensor of `shape` (which must hold exactly `len` elements).
    pub fn into_tensor(self, shape: impl Into<Shape>) -> Result<Tensor> {
        Tensor::from_storage(Arc::new(self.storage), shape)
    }
}
