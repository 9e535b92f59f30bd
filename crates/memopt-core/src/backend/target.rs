//! The hardware whose allocations a step reproduces: the CPU or a CUDA GPU. Workspace sizes are
//! functions of shapes asked of the target, so a Meta step planned for [`Target::Cuda`] allocates
//! exactly what the CUDA backend will, on a machine without a GPU.

use serde::{Deserialize, Serialize};

/// Whose workspace rules an op follows: the CPU backend's or the CUDA backend's. A real device
/// answers for itself ([`crate::Device::target`]); the Meta device carries the target it stands
/// in for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The CPU backend (rayon + `gemm`).
    #[default]
    Cpu,
    /// The CUDA backend (CUDA C kernels + cuBLAS); its workspace rules are defined here, ahead
    /// of its kernels, so that plans for a GPU are exact once they land.
    Cuda,
}

impl Target {
    /// Batches a training loop on this target holds on the device ahead of the one it trains
    /// on: their uploads overlap the step.
    ///
    /// - CPU: 0 (a batch is moved into place when its step starts; there is nothing to overlap).
    /// - CUDA: 1 (the next batch is allocated before the step and copied on the GPU's copy
    ///   stream while it runs).
    pub const fn batches_ahead(self) -> usize {
        match self {
            Target::Cpu => 0,
            Target::Cuda => 1,
        }
    }

    /// Output pixels (GEMM columns) per im2col chunk of a convolution: enough images are
    /// grouped to reach this many columns (at least one image per chunk).
    ///
    /// - CPU: 1024 columns, which keeps the `[C*kh*kw, cols]` chunk in cache (grouped
    ///   convolutions, and input gradients that are not convolutions themselves: see
    ///   [`Target::conv_implicit_gemm`]).
    /// - CUDA: 4096 columns, so that each cuBLAS GEMM (`Co x 4096` outputs) fills the GPU while
    ///   the im2col chunk stays in tens of MB for wide layers; the CUDA im2col kernel writes the
    ///   same `[C*kh*kw, cols]` layout, and the same staging buffer is used when a chunk holds
    ///   several images.
    pub const fn conv_chunk_columns(self) -> usize {
        match self {
            Target::Cpu => 1024,
            Target::Cuda => 4096,
        }
    }

    /// Whether a convolution with one group runs as an implicit GEMM, with no im2col workspace:
    /// its forward and weight gradient pack the columns straight from the images into
    /// thread-local panels (a fixed 128 KiB per thread, untracked like the `gemm` crate's
    /// packing buffers), and its input gradient, where it is a convolution itself (stride 1,
    /// dilation 1, padding below the kernel size), takes one workspace buffer of the weight's
    /// size for the flipped weights; other input gradients keep im2col's chunks
    /// ([`Target::conv_chunk_columns`]).
    ///
    /// - CPU: yes.
    /// - CUDA: no; im2col + cuBLAS in chunks of [`Target::conv_chunk_columns`].
    pub const fn conv_implicit_gemm(self) -> bool {
        match self {
            Target::Cpu => true,
            Target::Cuda => false,
        }
    }

    /// Elements per f64 partial of a blocked sum (sum, mean, losses): one f64 workspace value
    /// per block when there is more than one block.
    ///
    /// - CPU: 16384 elements summed serially per rayon task.
    /// - CUDA: 4096 elements, one thread block (256 threads x 16 elements) per partial.
    pub const fn sum_block(self) -> usize {
        match self {
            Target::Cpu => 1 << 14,
            Target::Cuda => 1 << 12,
        }
    }

    /// Workspace of each GEMM-based op (linear, conv2d, forward and backward), in bytes,
    /// allocated after the op's other buffers and freed with them.
    ///
    /// - CPU: 0; the `gemm` crate packs into its own small thread-local buffers.
    /// - CUDA: 4 MiB, handed to cuBLAS with `cublasSetWorkspace` for the op's GEMMs (cuBLAS's
    ///   documented default workspace size before Hopper), so that cuBLAS never allocates
    ///   behind the tracker's back.
    pub const fn gemm_workspace_bytes(self) -> usize {
        match self {
            Target::Cpu => 0,
            Target::Cuda => 4 << 20,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Cpu => "cpu",
            Target::Cuda => "cuda",
        })
    }
}
