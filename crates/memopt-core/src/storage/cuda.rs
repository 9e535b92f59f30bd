//! GPU storage through cudarc. Every entry point checks that the driver library is present and
//! the ordinal exists before touching the driver, because cudarc panics when libcuda is absent.
//!
//! A tensor's GPU memory is a block of the GPU tracker's caching allocator (see
//! [`super::CudaBacking`]): [`CudaData::in_block`] wraps it, then it is zero-filled
//! ([`CudaData::fill_zero`], only for blocks not known to be zero) or uploaded into
//! ([`CudaData::upload_into`]); copies on the GPU are ops (`kernels::copy_as`).

use super::CpuData;
use super::device_slice::DeviceSlice;
use crate::memory::DeviceBlock;
use crate::{CoreError, DType, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use half::{bf16, f16};
use std::sync::{Arc, Mutex, OnceLock};

/// Device memory of one dtype.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum CudaData {
    F32(DeviceSlice<f32>),
    F16(DeviceSlice<f16>),
    BF16(DeviceSlice<bf16>),
    U8(DeviceSlice<u8>),
    U32(DeviceSlice<u32>),
    I64(DeviceSlice<i64>),
}

/// Runs `$body` with `$s` bound to the slice of whichever dtype `$data` holds.
macro_rules! each_dtype {
    ($data:expr, $s:ident => $body:expr) => {
        match $data {
            CudaData::F32($s) => $body,
            CudaData::F16($s) => $body,
            CudaData::BF16($s) => $body,
            CudaData::U8($s) => $body,
            CudaData::U32($s) => $body,
            CudaData::I64($s) => $body,
        }
    };
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
    per_gpu(&CONTEXTS, ordinal, || {
        let ctx = CudaContext::new(ordinal).map_err(driver_err("creating a CUDA context"))?;
        // SAFETY: memopt orders every kernel, copy, memset and allocation of a GPU itself: one
        // compute stream in program order, and its copy stream through explicit events
        // (`crate::cuda::copy_stream`); without tracking, slices carry no events (none is
        // created per tensor).
        unsafe { ctx.disable_event_tracking() };
        Ok(ctx)
    })
}

/// The value `cache` holds for GPU `ordinal`, made by `make` on first use (one per GPU, for
/// the life of the process).
pub(crate) fn per_gpu<T: Clone>(
    cache: &Mutex<Vec<Option<T>>>,
    ordinal: usize,
    make: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let mut cached = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cached.len() <= ordinal {
        cached.resize(ordinal + 1, None);
    }
    if let Some(v) = &cached[ordinal] {
        return Ok(v.clone());
    }
    let v = make()?;
    cached[ordinal] = Some(v.clone());
    Ok(v)
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
        each_dtype!(self, s => s.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        (self.len() * self.dtype().size_in_bytes()) as u64
    }

    /// `len` elements of `dtype` over `block` (`None` only for `len == 0`) of GPU `ordinal`,
    /// holding whatever the block holds (zeros when fresh, else earlier values: never
    /// uninitialised memory, since segments are zeroed when reserved).
    pub fn in_block(
        ordinal: usize,
        dtype: DType,
        len: usize,
        block: Option<DeviceBlock>,
    ) -> Result<CudaData> {
        let stream = crate::cuda::stream(ordinal)?;
        Ok(match dtype {
            DType::F32 => CudaData::F32(DeviceSlice::in_block(&stream, block, len)?),
            DType::F16 => CudaData::F16(DeviceSlice::in_block(&stream, block, len)?),
            DType::BF16 => CudaData::BF16(DeviceSlice::in_block(&stream, block, len)?),
            DType::U8 => CudaData::U8(DeviceSlice::in_block(&stream, block, len)?),
            DType::U32 => CudaData::U32(DeviceSlice::in_block(&stream, block, len)?),
            DType::I64 => CudaData::I64(DeviceSlice::in_block(&stream, block, len)?),
        })
    }

    /// Sets every byte to zero with `cuMemsetD8Async` on the GPU's stream.
    pub fn fill_zero(&mut self) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let bytes = self.bytes() as usize;
        let ptr = self.device_ptr();
        let stream = each_dtype!(&*self, s => s.stream().clone());
        // SAFETY: `ptr` addresses this data's `bytes` bytes, which it owns exclusively (`&mut
        // self`); the memset is queued on the stream every use of the memory is queued on, and
        // zero bytes are a valid value of every dtype.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0, bytes, stream.cu_stream()) }
            .map_err(driver_err("zeroing GPU memory (cuMemsetD8Async)"))
    }

    /// Copies host `data` (same dtype and length) into this memory.
    pub fn upload_into(&mut self, data: &CpuData) -> Result<()> {
        const OP: &str = "copying host to GPU";
        self.check_same(OP, data.dtype(), data.len())?;
        if self.is_empty() {
            return Ok(());
        }
        let e = driver_err(OP);
        match (self, data) {
            (CudaData::F32(d), CpuData::F32(v)) => upload(d, v).map_err(e),
            (CudaData::F16(d), CpuData::F16(v)) => upload(d, v).map_err(e),
            (CudaData::BF16(d), CpuData::BF16(v)) => upload(d, v).map_err(e),
            (CudaData::U8(d), CpuData::U8(v)) => upload(d, v).map_err(e),
            (CudaData::U32(d), CpuData::U32(v)) => upload(d, v).map_err(e),
            (CudaData::I64(d), CpuData::I64(v)) => upload(d, v).map_err(e),
            _ => unreachable!("dtypes checked equal above"),
        }
    }

    fn check_same(&self, op: &'static str, dtype: DType, len: usize) -> Result<()> {
        if dtype != self.dtype() || len != self.len() {
            return Err(CoreError::invalid(
                op,
                format!(
                    "{len} elements of {dtype} cannot fill GPU memory of {} elements of {}",
                    self.len(),
                    self.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// Copies the GPU data back to the host (waits for the GPU's stream).
    pub fn download(&self, ordinal: usize) -> Result<CpuData> {
        self.download_range(ordinal, 0..self.len())
    }

    /// Elements `range` of this buffer, downloaded to the host (only those come down: a view's
    /// range, not its whole storage). An error when the range lies outside the buffer.
    pub fn download_range(&self, ordinal: usize, range: std::ops::Range<usize>) -> Result<CpuData> {
        if range.is_empty() {
            return Ok(CpuData::from_empty(self.dtype()));
        }
        let outside = || {
            CoreError::invalid(
                "download",
                format!(
                    "elements {range:?} lie outside the GPU buffer of {} elements",
                    self.len()
                ),
            )
        };
        let stream = crate::cuda::stream(ordinal)?;
        let e = driver_err("copying GPU to host");
        // The range of one typed slice, down to a host vector of the same variant.
        macro_rules! down {
            ($s:expr, $variant:ident) => {
                CpuData::$variant(
                    stream
                        .clone_dtoh(&$s.try_slice(range.clone()).ok_or_else(outside)?)
                        .map_err(&e)?
                        .into(),
                )
            };
        }
        Ok(match self {
            CudaData::F32(s) => down!(s, F32),
            CudaData::F16(s) => down!(s, F16),
            CudaData::BF16(s) => down!(s, BF16),
            CudaData::U8(s) => down!(s, U8),
            CudaData::U32(s) => down!(s, U32),
            CudaData::I64(s) => down!(s, I64),
        })
    }

    /// The device address (CUdeviceptr) of the first element. Kernels reach a view's first
    /// element at `device_ptr() + offset * element size`; see [`crate::DataRead::cuda_ptr`].
    pub fn device_ptr(&self) -> u64 {
        fn base<T>(s: &CudaSlice<T>) -> u64 {
            // Every launch goes to the one stream of the slice's GPU (`cuda::stream`), the one
            // the slice was allocated on, so no cross-stream event is needed: the guard
            // `device_ptr` returns records nothing without event tracking.
            let (ptr, _sync) = s.device_ptr(s.stream());
            ptr
        }
        each_dtype!(self, s => base(s))
    }
}

/// Host to device on the slice's stream.
fn upload<T: cudarc::driver::DeviceRepr>(
    dst: &mut CudaSlice<T>,
    src: &[T],
) -> std::result::Result<(), cudarc::driver::DriverError> {
    let stream: Arc<CudaStream> = dst.stream().clone();
    stream.memcpy_htod(src, dst)
}
