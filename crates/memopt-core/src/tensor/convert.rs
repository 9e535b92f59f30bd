//! Moving tensors between dtypes and devices, and reading values out.

use super::Tensor;
use crate::memory::MemoryKind;
use crate::storage::{CpuData, Element, Storage, StorageData};
use crate::{CoreError, DType, Device, Result};
use std::sync::Arc;

impl Tensor {
    /// The values as a host vector of `T` (the dtype must be `T`'s).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.expect_dtype("to_vec", T::DTYPE)?;
        let data = self.host_data("to_vec")?;
        Ok(T::slice(&data).map(<[T]>::to_vec).unwrap_or_default())
    }

    /// The values converted to f32 (any dtype).
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        match self
            .host_data("to_vec_f32")?
            .convert(0..self.elem_count(), DType::F32)
        {
            CpuData::F32(v) => Ok(v.into_vec()),
            _ => unreachable!("convert to F32 yields F32 data"),
        }
    }

    /// The single value of a one-element tensor, as f32.
    pub fn to_scalar_f32(&self) -> Result<f32> {
        if self.elem_count() != 1 {
            return Err(CoreError::shape(
                "to_scalar_f32",
                "a tensor with one element",
                self.shape(),
            ));
        }
        Ok(self.to_vec_f32()?[0])
    }

    /// A copy converted to `dtype`, on the same device, recorded with `kind`. Floats round to
    /// nearest; integers saturate. On Meta only the allocation happens.
    pub fn to_dtype_as(&self, dtype: DType, kind: MemoryKind) -> Result<Tensor> {
        let n = self.elem_count();
        let storage = match self.device() {
            Device::Meta(_) => Storage::from_parts(StorageData::Meta, dtype, n, self.device(), kind),
            Device::Cpu => Storage::from_cpu(&self.host_data("to_dtype")?.convert(0..n, dtype), kind),
            Device::Cuda(ordinal) => {
                let host = self.host_data("to_dtype")?.convert(0..n, dtype);
                upload_staged(ordinal, host, kind)
            }
        }?;
        Ok(Tensor::from_storage(Arc::new(storage), self.shape().clone())?.with_spike_flag(self.is_spike()))
    }

    /// A copy converted to `dtype`, keeping this tensor's kind.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        self.to_dtype_as(dtype, self.kind())
    }

    /// A copy on `device`, recorded there with `kind`. Meta tensors cannot move to a device
    /// with data (they have none); anything can move to Meta. A copy within one GPU stays on
    /// it (a device-to-device copy of the view); other moves go through tracked host staging.
    pub fn to_device_as(&self, device: Device, kind: MemoryKind) -> Result<Tensor> {
        if matches!(device, Device::Cuda(_)) && device == self.device() {
            return crate::kernels::copy_as(self, kind);
        }
        let (dtype, n) = (self.dtype(), self.elem_count());
        let storage = match device {
            Device::Meta(_) => Storage::from_parts(StorageData::Meta, dtype, n, device, kind),
            Device::Cpu => Storage::from_cpu(&self.host_data("to_device")?, kind),
            Device::Cuda(ordinal) => {
                let host = self.host_data("to_device")?;
                upload_staged(ordinal, host, kind)
            }
        }?;
        Ok(Tensor::from_storage(Arc::new(storage), self.shape().clone())?
            .with_known_values(self.known_values()))
    }

    /// A copy on `device`, keeping this tensor's kind.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        self.to_device_as(device, self.kind())
    }

    /// A copy in fresh storage on the same device, recorded with `kind`.
    pub fn deep_copy(&self, kind: MemoryKind) -> Result<Tensor> {
        self.to_device_as(self.device(), kind)
    }
}

/// Uploads a host copy to GPU `ordinal` into a block of its caching allocator, recorded with
/// `kind`. The copy is staging: while it lives it is tracked on the CPU as workspace, so a
/// device move's host bytes show in the CPU's figures.
pub(crate) fn upload_staged(ordinal: usize, host: CpuData, kind: MemoryKind) -> Result<Storage> {
    let staging = Storage::from_cpu(&host, MemoryKind::Workspace)?;
    drop(host);
    let guard = staging.read();
    match &*guard {
        StorageData::Cpu(d) => Storage::upload(d, ordinal, kind),
        _ => Err(CoreError::invalid("upload", "host staging holds no host data")),
    }
}
