//! memopt-core: tensors, dtypes, devices (Cpu, Meta, Cuda), tracked storage, a counter-based RNG
//! and kernels with their backward functions, each with a CPU half and a CUDA half.
//!
//! Every buffer is allocated through its device's [`MemoryTracker`], so current and peak bytes
//! are exact; on the [`Device::META`] device kernels compute nothing but allocate exactly as on
//! the CPU, which makes a whole training step's peak computable in microseconds.
//!
//! ```
//! use memopt_core::{Device, DType, MemoryKind, MemoryTracker, Tensor, kernels};
//! let x = Tensor::full([2, 3], -1.0, Device::META, MemoryKind::Input).unwrap();
//! let y = kernels::relu(&x).unwrap();
//! assert_eq!(y.dims(), &[2, 3]);
//! assert_eq!(MemoryTracker::current(Device::META).current_bytes(), 2 * 2 * 3 * 4);
//! ```
#![warn(missing_docs)]

pub mod backend;
pub mod cpu_isa;
pub mod cuda;
mod device;
mod dtype;
mod error;
pub mod input_file;
pub mod kernels;
pub mod memory;
pub mod output_file;
pub mod rng;
mod shape;
pub mod stats;
pub mod storage;
mod tensor;
pub mod units;

pub use backend::{Init, Target};
pub use cpu_isa::CpuIsa;
pub use device::Device;
pub use dtype::DType;
pub use error::{CoreError, Result};
pub use half::{bf16, f16};
pub use memory::caching::AllocatorConfig;
pub use memory::{MemoryKind, MemoryTracker, ModulePath, Phase, Scope};
pub use rng::{Philox, RngState};
pub use shape::Shape;
pub use storage::{Element, cuda_device_count};
pub use tensor::{
    DataRead, DataWrite, KernelBuffer, KnownValues, PendingTensor, Tensor, host_vec_with_capacity,
};
