//! GPU storage through cudarc. Every entry point checks that the driver library is present and
//! the ordinal exists before touching the driver, because cudarc panics when libcuda is absent.

use super::CpuData;
use crate::{CoreError, DType, Result};
use cudarc::driver::{CudaContext, CudaSlice};
use half::{bf16, f16};
use std::sync::{Arc, Mutex, OnceLock};

/// Device memory of one dtype.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum CudaData {
    F32(CudaSlice<f32>),
    F16(CudaSlice<f16>),
    BF16(CudaSlice<bf16>),
    U8(CudaSlice<u8>),
    U32(CudaSlice<u32>),
    I64(CudaSlice<i64>),
}

fn driver_err(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CoreError {
    move |e| CoreError::Cuda {
        op,
        message: e.to_string(),
    }
}

/// Number of CUDA devices, or why CUDA cannot be used (no driver library, driver failure).
pub fn cuda_device_count() -> Result<usize> {
    static COUNT: OnceLock<std::result::Result<usize, CoreError>> = OnceLock::new();
    COUNT
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the driver library; no driver call is made.
            let present = unsafe { cudarc::driver::sys::is_culib_present() };
            if !present {
                return Err(CoreError::CudaUnavailable {
                    reason: "the NVIDIA driver library (libcuda.so) was not found on this machine; \
                             use the cpu or meta device"
                        .into(),
                });
            }
            CudaContext::device_count()
                .map(|n| n.max(0) as usize)
                .map_err(|e| CoreError::CudaUnavailable {
                    reason: format!("the CUDA driver failed to initialise: {e}"),
                })
        })
        .clone()
}

/// The (cached) primary context of GPU `ordinal`, after checking that it exists.
pub fn cuda_context(ordinal: usize) -> Result<Arc<CudaContext>> {
    static CONTEXTS: Mutex<Vec<Option<Arc<CudaContext>>>> = Mutex::new(Vec::new());
    let available = cuda_device_count()?;
    if ordinal >= available {
        return Err(CoreError::CudaDeviceNotFound { ordinal, available });
    }
    let mut ctxs = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if ctxs.len() <= ordinal {
        ctxs.resize(ordinal + 1, None);
    }
    if let Some(ctx) = &ctxs[ordinal] {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(driver_err("creating a CUDA context"))?;
    ctxs[ordinal] = Some(ctx.clone());
    Ok(ctx)
}

impl CudaData {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            CudaData::F32(_) => DType::F32,
            CudaData::F16(_) => DType::F16,
            CudaData::BF16(_) => DType::BF16,
            CudaData::U8(_) => DType::U8,
            CudaData::U32(_) => DType::U32,
            CudaData::I64(_) => DType::I64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            CudaData::F32(s) => s.len(),
            CudaData::F16(s) => s.len(),
            CudaData::BF16(s) => s.len(),
            CudaData::U8(s) => s.len(),
            CudaData::U32(s) => s.len(),
            CudaData::I64(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` zeros of `dtype` on GPU `ordinal`.
    pub fn zeros(ordinal: usize, dtype: DType, len: usize) -> Result<CudaData> {
        let stream = cuda_context(ordinal)?.default_stream();
        let e = driver_err("allocating GPU memory");
        Ok(match dtype {
            DType::F32 => CudaData::F32(stream.alloc_zeros(len).map_err(e)?),
            DType::F16 => CudaData::F16(stream.alloc_zeros(len).map_err(e)?),
            DType::BF16 => CudaData::BF16(stream.alloc_zeros(len).map_err(e)?),
            DType::U8 => CudaData::U8(stream.alloc_zeros(len).map_err(e)?),
            DType::U32 => CudaData::U32(stream.alloc_zeros(len).map_err(e)?),
            DType::I64 => CudaData::I64(stream.alloc_zeros(len).map_err(e)?),
        })
    }

    /// Copies host data to GPU `ordinal`.
    pub fn upload(ordinal: usize, data: &CpuData) -> Result<CudaData> {
        let stream = cuda_context(ordinal)?.default_stream();
        let e = driver_err("copying host to GPU");
        Ok(match data {
            CpuData::F32(v) => CudaData::F32(stream.clone_htod(&v[..]).map_err(e)?),
            CpuData::F16(v) => CudaData::F16(stream.clone_htod(&v[..]).map_err(e)?),
            CpuData::BF16(v) => CudaData::BF16(stream.clone_htod(&v[..]).map_err(e)?),
            CpuData::U8(v) => CudaData::U8(stream.clone_htod(&v[..]).map_err(e)?),
            CpuData::U32(v) => CudaData::U32(stream.clone_htod(&v[..]).map_err(e)?),
            CpuData::I64(v) => CudaData::I64(stream.clone_htod(&v[..]).map_err(e)?),
        })
    }

    /// Copies the GPU data back to the host.
    pub fn download(&self, ordinal: usize) -> Result<CpuData> {
        let stream = cuda_context(ordinal)?.default_stream();
        let e = driver_err("copying GPU to host");
        Ok(match self {
            CudaData::F32(s) => CpuData::F32(stream.clone_dtoh(s).map_err(e)?.into()),
            CudaData::F16(s) => CpuData::F16(stream.clone_dtoh(s).map_err(e)?.into()),
            CudaData::BF16(s) => CpuData::BF16(stream.clone_dtoh(s).map_err(e)?.into()),
            CudaData::U8(s) => CpuData::U8(stream.clone_dtoh(s).map_err(e)?.into()),
            CudaData::U32(s) => CpuData::U32(stream.clone_dtoh(s).map_err(e)?.into()),
            CudaData::I64(s) => CpuData::I64(stream.clone_dtoh(s).map_err(e)?.into()),
        })
    }
}

impl CudaData {
    /// The device address (CUdeviceptr) of the first element. Kernels reach a view's first
    /// element at `device_ptr() + offset * element size`; see [`crate::DataRead::cuda_ptr`].
    pub fn device_ptr(&self) -> u64 {
        use cudarc::driver::DevicePtr;
        fn base<T>(s: &CudaSlice<T>) -> u64 {
            // Every launch goes to the one stream of the slice's GPU (`cuda::stream`), the one
            // the slice was allocated on, so no cross-stream event is needed: the guard
            // `device_ptr` returns records nothing in single-stream mode.
            let (ptr, _sync) = s.device_ptr(s.stream());
            ptr
        }
        match self {
            CudaData::F32(s) => base(s),
            CudaData::F16(s) => base(s),
            CudaData::BF16(s) => base(s),
            CudaData::U8(s) => base(s),
            CudaData::U32(s) => base(s),
            CudaData::I64(s) => base(s),
        }
    }
}
