//! Run-time compiled CUDA kernels: NVRTC compiles CUDA C source to PTX, and a per-context cache
//! loads each source once per GPU and hands out its functions.
//!
//! Nothing here needs a CUDA toolkit at build time: cudarc loads `libnvrtc` and `libcuda` when
//! first used. Every entry point checks that the library it needs is present before calling
//! into it (cudarc panics otherwise) and returns [`crate::CoreError::CudaUnavailable`] with the
//! way to fix it when it is not.
//!
//! ```
//! use memopt_core::cuda::{self, KernelSource};
//! static SCALE: KernelSource = KernelSource {
//!     name: "scale.cu",
//!     source: r#"extern "C" __global__ void scale(float* x, float s, unsigned long long n) {
//!         unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
//!         if (i < n) x[i] *= s;
//!     }"#,
//!     kernels: &["scale"],
//! };
//! match cuda::compile_ptx(SCALE.source, SCALE.name) {
//!     Ok(ptx) => assert!(ptx.to_src().contains(".entry scale")),
//!     // No libnvrtc on this machine: the error says how to install it.
//!     Err(e) => assert!(e.to_string().contains("NVRTC")),
//! }
//! ```

mod cache;
mod copy_stream;
mod device_memory;
mod event_clock;
mod gate;
pub mod gemm;
mod launch;
pub mod launchers;
mod nvrtc;
mod params;
mod ptx_check;

pub use cache::{cuda_function, loaded_module_count};
pub use copy_stream::copy_stream;
pub(crate) use copy_stream::{after_compute, compute_waits_for};
pub use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
pub use cudarc::nvrtc::Ptx;
pub use device_memory::{DeviceMemory, device_memory};
pub use event_clock::EventClock;
pub use gate::{
    REQUIRE_GPU_VAR, REQUIRE_NVRTC_VAR, gpu_for_test, gpu_or_skip, gpu_with_nvrtc, nvrtc_or_skip,
};
pub use launch::{
    ArgKind, BLOCK_THREADS, CudaPtr, KernelArg, KernelTable, MAX_BLOCKS, Signature, blocks, copy_device,
    grid_for, launch_kernel, read_back, stream,
};
pub(crate) use launch::{arg_type, kernel_table};
pub use launchers::kernel_sources;
pub use nvrtc::{
    NVRTC_OPTIONS, compile_cubin, compile_kernel_source, compile_ptx, nvrtc_available, nvrtc_version,
};
pub use params::{ConvGeom, NeuronBackwardConsts, PoolGeom};
pub use ptx_check::{check_signatures_against_ptx, ptx_entries, ptx_entry_params};

/// A CUDA C translation unit compiled at run time, and the `extern "C"` kernels it defines.
/// Declare one as a `static` next to the code that launches its kernels.
#[derive(Debug)]
pub struct KernelSource {
    /// File name used in compiler messages and as part of the cache key (e.g. `"bitspike.cu"`).
    pub name: &'static str,
    /// The CUDA C source.
    pub source: &'static str,
    /// Names of the `extern "C" __global__` functions it defines.
    pub kernels: &'static [&'static str],
}
