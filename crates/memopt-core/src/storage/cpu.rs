//! Typed host buffers.

use crate::DType;
use half::{bf16, f16};

/// Host data of one dtype.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum CpuData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    U8(Vec<u8>),
    U32(Vec<u32>),
    I64(Vec<i64>),
}

impl CpuData {
    /// `len` zeros of `dtype`.
    pub fn zeros(dtype: DType, len: usize) -> CpuData {
        match dtype {
            DType::F32 => CpuData::F32(vec![0.0; len]),
            DType::F16 => CpuData::F16(vec![f16::ZERO; len]),
            DType::BF16 => CpuData::BF16(vec![bf16::ZERO; len]),
            DType::U8 => CpuData::U8(vec![0; len]),
            DType::U32 => CpuData::U32(vec![0; len]),
            DType::I64 => CpuData::I64(vec![0; len]),
        }
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
            DType::F32 => CpuData::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F16 => CpuData::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::BF16 => CpuData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::U8 => CpuData::U8(v.iter().map(|&x| x as u8).collect()),
            DType::U32 => CpuData::U32(v.iter().map(|&x| x as u32).collect()),
            DType::I64 => CpuData::I64(v.iter().map(|&x| x as i64).collect()),
        }
    }

    /// A copy of elements `range`.
    pub fn slice(&self, range: std::ops::Range<usize>) -> CpuData {
        match self {
            CpuData::F32(v) => CpuData::F32(v[range].to_vec()),
            CpuData::F16(v) => CpuData::F16(v[range].to_vec()),
            CpuData::BF16(v) => CpuData::BF16(v[range].to_vec()),
            CpuData::U8(v) => CpuData::U8(v[range].to_vec()),
            CpuData::U32(v) => CpuData::U32(v[range].to_vec()),
            CpuData::I64(v) => CpuData::I64(v[range].to_vec()),
        }
    }
}
