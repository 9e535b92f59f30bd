//! Typed access to tensor data for kernels: a slice on the CPU, nothing on Meta.
//!
//! A kernel reads its inputs with [`Tensor::read`], allocates its outputs and workspace with
//! [`KernelBuffer`] (in the same order on every device, so Meta and CPU record identical event
//! streams), computes only when the slices are present, and turns outputs into tensors.

use super::Tensor;
use crate::memory::MemoryKind;
use crate::storage::{Element, Storage, StorageData};
use crate::{CoreError, Device, Result, Shape};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

/// Checks that `device` can run a CPU-or-Meta kernel. CUDA kernels arrive with the CUDA backend.
pub(crate) fn ensure_host_kernel(op: &'static str, device: Device) -> Result<()> {
    match device {
        Device::Cpu | Device::Meta => Ok(()),
        Device::Cuda(_) => Err(CoreError::Unsupported {
            op,
            device,
            hint: "; move the tensors to the cpu (to_device) or plan on the meta device".into(),
        }),
    }
}

/// Read access to a tensor's elements of type `T`.
pub struct DataRead<'a, T: Element> {
    guard: RwLockReadGuard<'a, StorageData>,
    range: Range<usize>,
    _t: PhantomData<T>,
}

impl<T: Element> DataRead<'_, T> {
    /// The elements on the CPU; `None` on Meta.
    pub fn slice(&self) -> Option<&[T]> {
        match &*self.guard {
            StorageData::Cpu(d) => T::slice(d).map(|s| &s[self.range.clone()]),
            _ => None,
        }
    }
}

/// Write access to a tensor's elements of type `T` (in-place kernels).
pub struct DataWrite<'a, T: Element> {
    guard: RwLockWriteGuard<'a, StorageData>,
    range: Range<usize>,
    _t: PhantomData<T>,
}

impl<T: Element> DataWrite<'_, T> {
    /// The elements on the CPU; `None` on Meta.
    pub fn slice_mut(&mut self) -> Option<&mut [T]> {
        let range = self.range.clone();
        match &mut *self.guard {
            StorageData::Cpu(d) => T::slice_mut(d).map(|s| &mut s[range]),
            _ => None,
        }
    }
}

impl Tensor {
    fn range(&self) -> Range<usize> {
        self.0.offset..self.0.offset + self.elem_count()
    }

    /// Reads the elements as `T` for kernel `op`: checks the dtype and that the device runs host
    /// kernels. The slice is `None` on Meta.
    pub fn read<T: Element>(&self, op: &'static str) -> Result<DataRead<'_, T>> {
        self.expect_dtype(op, T::DTYPE)?;
        ensure_host_kernel(op, self.device())?;
        Ok(DataRead {
            guard: self.0.storage.read(),
            range: self.range(),
            _t: PhantomData,
        })
    }

    /// Writes the elements in place as `T` for kernel `op`. The slice is `None` on Meta. Holding
    /// this while reading a tensor that shares its storage would deadlock: in-place kernels check
    /// [`Tensor::same_storage`] first.
    pub fn write<T: Element>(&self, op: &'static str) -> Result<DataWrite<'_, T>> {
        self.expect_dtype(op, T::DTYPE)?;
        ensure_host_kernel(op, self.device())?;
        Ok(DataWrite {
            guard: self.0.storage.write(),
            range: self.range(),
            _t: PhantomData,
        })
    }
}

/// A freshly allocated, tracked buffer owned by a kernel: an output (turned into a tensor with
/// [`KernelBuffer::into_tensor`]) or workspace (dropped when done, which records its free).
pub struct KernelBuffer<T: Element> {
    storage: Storage,
    _t: PhantomData<T>,
}

impl<T: Element> KernelBuffer<T> {
    /// `len` zeroed elements on `device` (no data on Meta), recorded with `kind`.
    pub fn zeros(op: &'static str, device: Device, len: usize, kind: MemoryKind) -> Result<Self> {
        ensure_host_kernel(op, device)?;
        Ok(KernelBuffer {
            storage: Storage::zeros(T::DTYPE, len, device, kind)?,
            _t: PhantomData,
        })
    }

    /// Workspace of `len` elements (kind [`MemoryKind::Workspace`]).
    pub fn workspace(op: &'static str, device: Device, len: usize) -> Result<Self> {
        Self::zeros(op, device, len, MemoryKind::Workspace)
    }

    /// The elements on the CPU; `None` on Meta.
    pub fn slice_mut(&mut self) -> Option<&mut [T]> {
        match self.storage.data_mut() {
            StorageData::Cpu(d) => T::slice_mut(d),
            _ => None,
        }
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
