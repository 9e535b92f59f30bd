//! The error type of memopt-core: every public function returns [`Result`].

use crate::{DType, Device};

/// Result alias used throughout memopt-core.
pub type Result<T> = std::result::Result<T, CoreError>;

/// Everything that can go wrong in memopt-core. Each variant names the operation and what would
/// have been valid, so that the message alone tells the user how to fix the call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    /// Two shapes that must agree do not.
    #[error("{op}: shape mismatch: expected {expected}, got {got}")]
    ShapeMismatch {
        /// Operation that detected the problem.
        op: &'static str,
        /// What the operation needed, in words or as a shape.
        expected: String,
        /// What it was given.
        got: String,
    },
    /// A tensor has the wrong element type.
    #[error("{op}: expected dtype {expected}, got {got}{hint}")]
    DTypeMismatch {
        /// Operation that detected the problem.
        op: &'static str,
        /// The dtype the operation accepts.
        expected: DType,
        /// The dtype it was given.
        got: DType,
        /// Extra advice (may be empty).
        hint: String,
    },
    /// Tensors that must live on one device do not.
    #[error("{op}: tensors are on different devices ({a} and {b}); move them with to_device first")]
    DeviceMismatch {
        /// Operation that detected the problem.
        op: &'static str,
        /// Device of the first tensor.
        a: Device,
        /// Device of the offending tensor.
        b: Device,
    },
    /// An argument is outside the range the operation accepts.
    #[error("{op}: {message}")]
    InvalidArgument {
        /// Operation that detected the problem.
        op: &'static str,
        /// What was wrong and what would be valid.
        message: String,
    },
    /// Data was requested from a tensor that has none (a Meta tensor).
    #[error("{op}: tensor on {device} has no data (Meta tensors carry shape and dtype only)")]
    NoData {
        /// Operation that wanted the data.
        op: &'static str,
        /// Device of the tensor.
        device: Device,
    },
    /// An op read or wrote a stand-in made by `Tensor::unmaterialised`, which has no elements:
    /// a value an op was told nobody reads (a recomputed segment's output) was read after all.
    #[error(
        "{op}: the tensor of shape {shape} was never materialised (an output skipped because only its gradient is needed); nothing can read or write it"
    )]
    Unmaterialised {
        /// Operation that wanted the data.
        op: &'static str,
        /// Shape of the stand-in.
        shape: crate::Shape,
    },
    /// The CUDA half of an op asked for the device pointer of data that is not on a GPU.
    #[error(
        "{op}: a CUDA kernel was handed a tensor on {device}, which has no GPU memory; move it with to_device(cuda) first"
    )]
    NotOnGpu {
        /// Operation that wanted the pointer.
        op: &'static str,
        /// Device of the data.
        device: Device,
    },
    /// The CUDA driver library could not be loaded, or failed to initialise.
    #[error("CUDA is unavailable: {reason}")]
    CudaUnavailable {
        /// Why, e.g. "libcuda.so was not found".
        reason: String,
    },
    /// A CUDA ordinal beyond the devices present was requested.
    #[error("CUDA device {ordinal} does not exist: {available} device(s) present (valid ordinals: {})", valid_ordinals(*.available))]
    CudaDeviceNotFound {
        /// Requested ordinal.
        ordinal: usize,
        /// Number of devices the driver reports.
        available: usize,
    },
    /// A CUDA driver, NVRTC or cuBLAS call failed.
    #[error("{op}: CUDA error: {message}")]
    Cuda {
        /// Operation that failed.
        op: &'static str,
        /// Driver message.
        message: String,
    },
    /// The device could not provide the memory for an allocation.
    #[error(
        "out of memory on {device}: cannot allocate {bytes} bytes; plan with a smaller batch, fewer time steps or a memory budget"
    )]
    OutOfMemory {
        /// Device that refused the allocation.
        device: Device,
        /// Size of the refused allocation, in bytes.
        bytes: u64,
    },
    /// The caching allocator would pass its reserve limit (the memory a device has for this
    /// process, [`crate::MemoryTracker::set_reserve_limit`]) even after releasing every cached
    /// free segment, as PyTorch's allocator does when a device is full.
    #[error(
        "out of memory on {device}: cannot allocate {bytes} bytes: a new segment of {segment_bytes} bytes would take the caching allocator's reserved bytes from {reserved} past its reserve limit of {limit} bytes (its cached free segments were already released); plan with a larger budget, a smaller batch or fewer time steps"
    )]
    ReserveLimit {
        /// Device whose allocator refused.
        device: Device,
        /// Size of the refused request, in bytes.
        bytes: u64,
        /// Size of the segment it would have reserved, in bytes.
        segment_bytes: u64,
        /// Bytes held in segments when it refused (live blocks only: the cache was released).
        reserved: u64,
        /// The reserve limit, in bytes.
        limit: u64,
    },
    /// A GPU could not provide a segment for an allocation: names the bytes asked and what
    /// memopt already holds on that GPU, so the user sees whether the step or something
    /// outside it filled the device.
    #[error(
        "out of memory on {device}: cannot allocate {bytes} bytes (a new segment of {segment_bytes} bytes) while tensors hold {held} bytes and memopt's caching allocator reserves {reserved} bytes on it; plan with a budget (`memopt optimize --budget ...`), a smaller batch or fewer time steps, or free the GPU of other processes"
    )]
    CudaOutOfMemory {
        /// The GPU.
        device: Device,
        /// Size of the refused request, in bytes.
        bytes: u64,
        /// Size of the segment the caching allocator asked the driver for, in bytes.
        segment_bytes: u64,
        /// Bytes requested by the tensors alive on this GPU (this thread's tracker) when it failed.
        held: u64,
        /// Bytes in the caching allocator's segments on this GPU when it failed (after it gave
        /// its cached free segments back and retried).
        reserved: u64,
    },
    /// The bytes held on a device would exceed what a byte count can represent (sizes of
    /// Meta steps are unbounded by real memory).
    #[error(
        "the bytes held on {device} would exceed {} bytes: {held} held plus {bytes} more in {at}; plan with a smaller batch, fewer time steps or a smaller input",
        u64::MAX
    )]
    ByteCountOverflow {
        /// Where: `module features.3 (forward)`.
        at: String,
        /// Device tracked.
        device: Device,
        /// Bytes held before the allocation.
        held: u64,
        /// Size of the allocation, in bytes.
        bytes: u64,
    },
    /// The device cannot run this operation (yet).
    #[error("{op} is not implemented on {device}{hint}")]
    Unsupported {
        /// Operation requested.
        op: &'static str,
        /// Device it was requested on.
        device: Device,
        /// Extra advice (may be empty).
        hint: String,
    },
}

fn valid_ordinals(available: usize) -> String {
    match available {
        0 => "none".to_string(),
        1 => "0".to_string(),
        n => format!("0..={}", n - 1),
    }
}

impl CoreError {
    /// Whether this is an out-of-memory error of any device (a plan or candidate that meets one
    /// is rejected; nothing else is wrong with it).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            CoreError::OutOfMemory { .. }
                | CoreError::CudaOutOfMemory { .. }
                | CoreError::ReserveLimit { .. }
        )
    }

    /// Shorthand for [`CoreError::InvalidArgument`].
    pub fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        CoreError::InvalidArgument {
            op,
            message: message.into(),
        }
    }

    /// Shorthand for [`CoreError::ShapeMismatch`].
    pub fn shape(op: &'static str, expected: impl Into<String>, got: impl std::fmt::Display) -> Self {
        CoreError::ShapeMismatch {
            op,
            expected: expected.into(),
            got: got.to_string(),
        }
    }
}
