//! The backend seam: every op has one public entry point that validates its arguments, then
//! allocates its outputs and workspace through [`crate::KernelBuffer`] in a fixed order (sizes
//! asked of the device's [`Target`]), then hands the allocated buffers to the device's backend:
//!
//! - [`Device::Cpu`]: the CPU backend computes (rayon + `gemm`);
//! - [`Device::META`]: computes nothing; the allocations above are the whole effect, which is
//!   what makes a Meta step's peak exact for the target it carries;
//! - [`Device::Cuda`]: the CUDA backend: the op's CUDA half ([`compute`], [`launch_on`]) launches
//!   the kernels of [`crate::cuda::launchers`] and cuBLAS ([`crate::cuda::gemm`]) on the device
//!   addresses of the same buffers; [`launch`] (CPU-only code) answers [`CoreError::Unsupported`].
//!
//! Allocation never happens inside a backend, so Meta, CPU and CUDA allocate alike by
//! construction. See ARCHITECTURE.md, "The backend seam".

mod target;

pub use target::Target;

use crate::{CoreError, Device, KernelBuffer, Result};

/// The CUDA backend of one GPU, handed to an op's CUDA half by [`launch_on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaBackend {
    /// GPU ordinal.
    pub ordinal: usize,
}

impl CudaBackend {
    /// The answer of an op that has no CUDA kernel yet.
    pub fn unsupported(self, op: &'static str) -> CoreError {
        CoreError::Unsupported {
            op,
            device: Device::Cuda(self.ordinal),
            hint: "; move the tensors to the cpu (to_device) or plan on the meta device".into(),
        }
    }

    /// The one stream of this GPU, on which every kernel, copy and allocation runs in program
    /// order ([`crate::cuda::stream`]).
    pub fn stream(self) -> Result<std::sync::Arc<crate::cuda::CudaStream>> {
        crate::cuda::stream(self.ordinal)
    }
}

/// Runs the compute half of `op` on `device`'s backend, once the entry point has validated and
/// allocated: `cpu` on the CPU, nothing on Meta, and [`CoreError::Unsupported`] naming `op` on
/// CUDA (the op has no CUDA kernel yet).
pub fn launch(op: &'static str, device: Device, cpu: impl FnOnce() -> Result<()>) -> Result<()> {
    launch_on(device, cpu, |gpu| Err(gpu.unsupported(op)))
}

/// [`launch`] for an op that has both halves: `cpu` on the CPU, `cuda` on a GPU, nothing on
/// Meta. Generic over the caller's error type, so crates above core dispatch their own ops.
pub fn launch_on<E: From<CoreError>>(
    device: Device,
    cpu: impl FnOnce() -> std::result::Result<(), E>,
    cuda: impl FnOnce(CudaBackend) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    match device {
        Device::Cpu => cpu(),
        Device::Meta(_) => Ok(()),
        Device::Cuda(ordinal) => cuda(CudaBackend { ordinal }),
    }
}

/// The backend that computes an op on a device that holds data, handed to [`compute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// The CPU backend.
    Cpu,
    /// The CUDA backend of one GPU.
    Cuda(CudaBackend),
}

/// Runs the compute half of an op once its entry point has validated and allocated: `f` with
/// the CPU or CUDA backend, nothing on Meta. The one-closure form of [`launch_on`], for ops
/// whose two halves write the same buffers (two closures cannot both borrow them mutably).
pub fn compute<E: From<CoreError>>(
    device: Device,
    f: impl FnOnce(Compute) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    match device {
        Device::Cpu => f(Compute::Cpu),
        Device::Meta(_) => Ok(()),
        Device::Cuda(ordinal) => f(Compute::Cuda(CudaBackend { ordinal })),
    }
}

/// Whether a freshly allocated buffer must start zeroed, declared at its one allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// The kernel adds into the buffer (accumulators, scatter targets, partial sums that are
    /// only written for some indices): it must start at zero.
    Zeroed,
    /// The kernel writes every element before any is read. Today such buffers are zero-filled
    /// too; an allocator may hand them out uninitialised without changing any result.
    Overwritten,
}

/// The workspace a GEMM-based op (matmul, linear, conv2d; forward and backward) hands to its
/// GEMM library on `device`'s target ([`Target::gemm_workspace_bytes`]): none on the CPU, a
/// fixed cuBLAS workspace on CUDA. Allocated after the op's other buffers; keep it alive until
/// the compute returns.
pub fn gemm_workspace(op: &'static str, device: Device) -> Result<Option<KernelBuffer<u8>>> {
    let bytes = device.target().gemm_workspace_bytes();
    (bytes > 0)
        .then(|| KernelBuffer::workspace(op, device, bytes, Init::Overwritten))
        .transpose()
}
