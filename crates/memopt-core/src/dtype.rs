//! Element types.

use serde::{Deserialize, Serialize};

/// Element type of a tensor. f32 is the compute type on the CPU; f16 and bf16 are storage types
/// converted at the edges with [`crate::Tensor::to_dtype`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// Unsigned byte (masks, packed bits, bools).
    U8,
    /// Unsigned 32-bit integer (pooling indices, sparse indices).
    U32,
    /// Signed 64-bit integer (class labels).
    I64,
}

impl DType {
    /// All dtypes, in declaration order.
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::U8,
        DType::U32,
        DType::I64,
    ];

    /// Size of one element, in bytes.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
            DType::I64 => 8,
        }
    }

    /// Lower-case name as used in messages and JSON (`"f32"`, `"bf16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
        }
    }

    /// Whether the dtype is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype '{s}': valid dtypes are f32, f16, bf16, u8, u32, i64"))
    }
}
