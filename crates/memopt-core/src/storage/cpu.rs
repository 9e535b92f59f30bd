//! Typed host buffers.

use super::HostBuf;
use super::host_buf::PlainBits;
use crate::memory::HostBlock;
use crate::{CoreError, DType, Device, Result};
use half::{bf16, f16};
use std::alloc::{Layout, alloc_zeroed};

/// `len` zeros from the global allocator's zeroed allocation, or an out-of-memory error.
fn zeroed_vec<T: PlainBits>(len: usize) -> Result<Vec<T>> {
    let too_large = || CoreError::OutOfMemory {
        device: Device::Cpu,
        bytes: (len as u128 * size_of::<T>() as u128).min(u64::MAX as u128) as u64,
    };
    if len == 0 || size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<T>(len).map_err(|_| too_large())?;
    // SAFETY: `layout` has a non-zero size (len > 0, T is not zero-sized).
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(too_large());
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `[T; len]` (the layout a
    // `Vec<T>` of capacity `len` uses), and its `len` elements are initialised: all-zero bits are
    // a valid `T` (the `PlainBits` types).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// Host data of one dtype.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum CpuData {
    F32(HostBuf<f32>),
    F16(HostBuf<f16>),
    BF16(HostBuf<bf16>),
    U8(HostBuf<u8>),
    U32(HostBuf<u32>),
    I64(HostBuf<i64>),
}

/// `HostBuf::$ctor($args)` wrapped in the variant of `$dtype`.
macro_rules! of_dtype {
    ($dtype:expr, $ctor:ident($($arg:expr),*)) => {
        match $dtype {
            DType::F32 => CpuData::F32(HostBuf::$ctor($($arg),*)),
            DType::F16 => CpuData::F16(HostBuf::$ctor($($arg),*)),
            DType::BF16 => CpuData::BF16(HostBuf::$ctor($($arg),*)),
            DType::U8 => CpuData::U8(HostBuf::$ctor($($arg),*)),
            DType::U32 => CpuData::U32(HostBuf::$ctor($($arg),*)),
            DType::I64 => CpuData::I64(HostBuf::$ctor($($arg),*)),
        }
    };
}

/// Applies `$body` to the buffer of every variant of `$data`, rewrapping the result in the
/// same variant.
macro_rules! map_variant {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            CpuData::F32($v) => CpuData::F32($body),
            CpuData::F16($v) => CpuData::F16($body),
            CpuData::BF16($v) => CpuData::BF16($body),
            CpuData::U8($v) => CpuData::U8($body),
            CpuData::U32($v) => CpuData::U32($body),
            CpuData::I64($v) => CpuData::I64($body),
        }
    };
}

impl CpuData {
    /// `len` zeros of `dtype`; an error (not an abort) when the host cannot provide the memory.
    /// The pages are zeroed lazily by the allocator, as `vec![0; len]` would be.
    pub fn zeros(dtype: DType, len: usize) -> Result<CpuData> {
        Ok(match dtype {
            DType::F32 => CpuData::F32(zeroed_vec(len)?.into()),
            DType::F16 => CpuData::F16(zeroed_vec(len)?.into()),
            DType::BF16 => CpuData::BF16(zeroed_vec(len)?.into()),
            DType::U8 => CpuData::U8(zeroed_vec(len)?.into()),
            DType::U32 => CpuData::U32(zeroed_vec(len)?.into()),
            DType::I64 => CpuData::I64(zeroed_vec(len)?.into()),
        })
    }

    /// `len` zeros of `dtype` in a caching-allocator block (filled only when the block is not
    /// known to be zero). The block must hold `len` elements.
    pub(crate) fn zeros_in(dtype: DType, len: usize, block: HostBlock) -> CpuData {
        of_dtype!(dtype, zeroed_in(block, len))
    }

    /// `len` elements of `dtype` over a caching-allocator block's bytes as they are (zeros or
    /// values earlier buffers wrote). The block must hold `len` elements.
    pub(crate) fn as_is_in(dtype: DType, len: usize, block: HostBlock) -> CpuData {
        of_dtype!(dtype, as_is_in(block, len))
    }

    /// A copy of this data in a caching-allocator block holding at least as many bytes.
    pub(crate) fn copied_in(&self, block: HostBlock) -> CpuData {
        map_variant!(self, v => HostBuf::copied_in(block, v))
    }

    /// No elements of `dtype`.
    pub(crate) fn from_empty(dtype: DType) -> CpuData {
        of_dtype!(dtype, from(Vec::new()))
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            CpuData::F32(_) => DType::F32,
            CpuData::F16(_) => DType::F16,
            CpuData::BF16(_) => DType::BF16,
            CpuData::U8(_) => DType::U8,
            CpuData::U32(_) => DType::U32,
            CpuData::I64(_) => DType::I64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            CpuData::F32(v) => v.len(),
            CpuData::F16(v) => v.len(),
            CpuData::BF16(v) => v.len(),
            CpuData::U8(v) => v.len(),
            CpuData::U32(v) => v.len(),
            CpuData::I64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `range` converted to f64 (exact for every dtype but i64 beyond 2^53).
    pub fn to_f64(&self, range: std::ops::Range<usize>) -> Vec<f64> {
        match self {
            CpuData::F32(v) => v[range].iter().map(|&x| x as f64).collect(),
            CpuData::F16(v) => v[range].iter().map(|&x| x.to_f64()).collect(),
            CpuData::BF16(v) => v[range].iter().map(|&x| x.to_f64()).collect(),
            CpuData::U8(v) => v[range].iter().map(|&x| x as f64).collect(),
            CpuData::U32(v) => v[range].iter().map(|&x| x as f64).collect(),
            CpuData::I64(v) => v[range].iter().map(|&x| x as f64).collect(),
        }
    }

    /// Elements `range` converted to `dtype` (floats round to nearest; integers saturate).
    pub fn convert(&self, range: std::ops::Range<usize>, dtype: DType) -> CpuData {
        if dtype == self.dtype() {
            return self.slice(range);
        }
        let v = self.to_f64(range);
        match dtype {
            DType::F32 => CpuData::F32(v.iter().map(|&x| x as f32).collect::<Vec<_>>().into()),
            DType::F16 => CpuData::F16(v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>().into()),
            DType::BF16 => CpuData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>().into()),
            DType::U8 => CpuData::U8(v.iter().map(|&x| x as u8).collect::<Vec<_>>().into()),
            DType::U32 => CpuData::U32(v.iter().map(|&x| x as u32).collect::<Vec<_>>().into()),
            DType::I64 => CpuData::I64(v.iter().map(|&x| x as i64).collect::<Vec<_>>().into()),
        }
    }

    /// A copy of elements `range`.
    pub fn slice(&self, range: std::ops::Range<usize>) -> CpuData {
        map_variant!(self, v => v[range].to_vec().into())
    }
}
