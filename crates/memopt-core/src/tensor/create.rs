//! Creating tensors.

use super::Tensor;
use crate::memory::MemoryKind;
use crate::rng::Philox;
use crate::storage::{CpuData, Element, Storage, StorageData};
use crate::{CoreError, Device, Result, Shape};
use std::sync::Arc;

impl Tensor {
    /// Zeros of `dtype` on `device`, recorded with `kind`.
    pub fn zeros(
        shape: impl Into<Shape>,
        dtype: crate::DType,
        device: Device,
        kind: MemoryKind,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let storage = Storage::zeros(dtype, shape.elem_count_for("Tensor::zeros")?, device, kind)?;
        Tensor::from_storage(Arc::new(storage), shape)
    }

    /// A tensor from host values, placed on `device` (the values are dropped on Meta).
    pub fn from_vec<T: Element>(
        data: Vec<T>,
        shape: impl Into<Shape>,
        device: Device,
        kind: MemoryKind,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let count = shape.elem_count_for("Tensor::from_vec")?;
        if data.len() != count {
            return Err(CoreError::shape(
                "Tensor::from_vec",
                format!("{count} values for shape {shape}"),
                format!("{} values", data.len()),
            ));
        }
        let len = data.len();
        let storage = match device {
            Device::Cpu => Storage::from_cpu(&T::into_cpu(data), kind),
            Device::Meta(_) => Storage::from_parts(StorageData::Meta, T::DTYPE, len, device, kind),
            Device::Cuda(ordinal) => super::convert::upload_staged(ordinal, T::into_cpu(data), kind),
        }?;
        Tensor::from_storage(Arc::new(storage), shape)
    }

    /// A tensor filled with `value`.
    pub fn full(shape: impl Into<Shape>, value: f32, device: Device, kind: MemoryKind) -> Result<Tensor> {
        let shape = shape.into();
        let n = shape.elem_count_for("Tensor::full")?;
        let data = if device.is_meta() {
            Vec::new()
        } else {
            host_vec(n, value)?
        };
        Self::from_host_or_meta(data, shape, device, kind)
    }

    /// A scalar f32 tensor.
    pub fn scalar(value: f32, device: Device, kind: MemoryKind) -> Result<Tensor> {
        Self::full(Shape::scalar(), value, device, kind)
    }

    /// Values drawn uniformly from `[low, high)` with `rng`. The generator advances by the same
    /// amount on every device, so a model built on Meta and on the CPU stays in step.
    pub fn rand_uniform(
        shape: impl Into<Shape>,
        low: f32,
        high: f32,
        rng: &mut Philox,
        device: Device,
        kind: MemoryKind,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let n = shape.elem_count_for("Tensor::rand_uniform")?;
        let start = rng.reserve(n as u64);
        let data = if device.is_meta() {
            Vec::new()
        } else {
            let mut v = host_vec(n, 0.0)?;
            crate::rng::fill_uniform(start, &mut v, low, high);
            v
        };
        Self::from_host_or_meta(data, shape, device, kind)
    }

    /// `data` on `device`; on Meta `data` is ignored (may be empty).
    fn from_host_or_meta(data: Vec<f32>, shape: Shape, device: Device, kind: MemoryKind) -> Result<Tensor> {
        if device.is_meta() {
            return Self::zeros(shape, crate::DType::F32, device, kind);
        }
        Self::from_vec(data, shape, device, kind)
    }

    /// Host data of this view, copied out (CPU) or downloaded (CUDA).
    pub(crate) fn host_data(&self, op: &'static str) -> Result<CpuData> {
        self.expect_materialised(op)?;
        let range = self.storage_offset()..self.storage_offset() + self.elem_count();
        match &*self.storage().read() {
            StorageData::Cpu(d) => Ok(d.slice(range)),
            StorageData::Meta => Err(CoreError::NoData {
                op,
                device: self.device(),
            }),
            StorageData::Cuda(g) => {
                let Device::Cuda(ordinal) = self.device() else {
                    unreachable!("CUDA data lives on a CUDA device")
                };
                // Only the view's range comes down, as tracked staging (a time chunk of a larger
                // tensor moves its own bytes, not the whole storage's).
                let n = range.len();
                let staging = Storage::from_cpu(&g.download_range(ordinal, range)?, MemoryKind::Workspace)?;
                let guard = staging.read();
                match &*guard {
                    StorageData::Cpu(d) => Ok(d.slice(0..n)),
                    _ => Err(CoreError::invalid(op, "host staging holds no host data")),
                }
            }
        }
    }
}

/// `n` copies of `value` on the host, or an out-of-memory error instead of an abort.
fn host_vec(n: usize, value: f32) -> Result<Vec<f32>> {
    let mut v = host_vec_with_capacity(n)?;
    v.resize(n, value);
    Ok(v)
}

/// An empty host vector with room for `n` elements, or an out-of-memory error naming the bytes
/// instead of an abort. Host data built outside the tensor constructors (synthetic batches,
/// labels) is allocated through this.
pub fn host_vec_with_capacity<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| CoreError::OutOfMemory {
        device: Device::Cpu,
        // Reported, not computed with: a size beyond u64 shows as u64::MAX.
        bytes: (n as u128 * size_of::<T>() as u128).min(u64::MAX as u128) as u64,
    })?;
    Ok(v)
}
