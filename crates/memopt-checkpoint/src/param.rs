//! Trainable parameters and non-trainable buffers owned by modules.

use memopt_core::Tensor;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifier of a parameter, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub u64);

static NEXT_PARAM: AtomicU64 = AtomicU64::new(0);

/// A trainable tensor (recorded as [`memopt_core::MemoryKind::Parameter`]). Optimizers update
/// its storage in place, so the handle itself never changes.
#[derive(Debug, Clone)]
pub struct Param {
    id: ParamId,
    value: Tensor,
}

impl Param {
    /// Wraps a tensor as a new parameter.
    pub fn new(value: Tensor) -> Self {
        Param {
            id: ParamId(NEXT_PARAM.fetch_add(1, Ordering::Relaxed)),
            value,
        }
    }

    /// Identifier.
    pub fn id(&self) -> ParamId {
        self.id
    }

    /// The value.
    pub fn tensor(&self) -> &Tensor {
        &self.value
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.value.elem_count()
    }
}

/// A non-trainable module tensor updated in place (BatchNorm running statistics).
#[derive(Debug, Clone)]
pub struct Buffer {
    value: Tensor,
}

impl Buffer {
    /// Wraps a tensor as a buffer.
    pub fn new(value: Tensor) -> Self {
        Buffer { value }
    }

    /// The value.
    pub fn tensor(&self) -> &Tensor {
        &self.value
    }
}
