//! Rust element types that map to a [`DType`].

use super::CpuData;
use crate::DType;
use half::{bf16, f16};

/// A Rust type stored in tensors of dtype [`Element::DTYPE`].
pub trait Element: Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static {
    /// The dtype of this type.
    const DTYPE: DType;
    /// Wraps a vector as host data.
    fn into_cpu(v: Vec<Self>) -> CpuData;
    /// The slice, if `data` holds this type.
    fn slice(data: &CpuData) -> Option<&[Self]>;
    /// The mutable slice, if `data` holds this type.
    fn slice_mut(data: &mut CpuData) -> Option<&mut [Self]>;
}

macro_rules! element {
    ($t:ty, $dtype:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            fn into_cpu(v: Vec<Self>) -> CpuData {
                CpuData::$dtype(v.into())
            }
            fn slice(data: &CpuData) -> Option<&[Self]> {
                match data {
                    CpuData::$dtype(v) => Some(&v[..]),
                    _ => None,
                }
            }
            fn slice_mut(data: &mut CpuData) -> Option<&mut [Self]> {
                match data {
                    CpuData::$dtype(v) => Some(&mut v[..]),
                    _ => None,
                }
            }
        }
    };
}

element!(f32, F32);
element!(f16, F16);
element!(bf16, BF16);
element!(u8, U8);
element!(u32, U32);
element!(i64, I64);
