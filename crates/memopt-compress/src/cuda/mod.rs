//! The CUDA halves of compression: CUDA C kernels (compiled at run time by NVRTC through
//! memopt-core's cache) launched through the backend seam on buffers the entry points in
//! `binary.rs` have already allocated, exactly as on the CPU and Meta. Every launch goes
//! through [`launch_kernel`] with this crate's signature tables. Without a driver, a GPU or
//! NVRTC every entry point returns a clear error.

use crate::cpu::SpikeElem;
use crate::{CompressError, Result};
use memopt_core::backend::CudaBackend;
use memopt_core::cuda::{
    ArgKind, BLOCK_THREADS, CudaPtr, KernelArg, KernelSource, KernelTable, MAX_BLOCKS, Signature, blocks,
    launch_kernel, read_back,
};
use memopt_core::{CoreError, DType};

/// The CUDA kernels of a byte-payload binary compressor (its `ByteCodec::CUDA`).
pub(crate) struct CudaKernels {
    /// Their source's signature table.
    pub table: &'static memopt_core::cuda::KernelTable,
    /// Pack kernels for f32, f16, bf16.
    pub pack: [&'static str; 3],
    /// Unpack kernels for f32, f16, bf16.
    pub unpack: [&'static str; 3],
}

impl CudaKernels {
    /// Index of `dtype` in the kernel tables (f32, f16, bf16).
    pub fn slot(dtype: DType) -> usize {
        match dtype {
            DType::F16 => 1,
            DType::BF16 => 2,
            _ => 0,
        }
    }
}

/// BitSpike pack and unpack kernels (`bitspike_{pack,unpack}_{f32,f16,bf16}`) and the unpack of
/// a span that starts inside a byte (`bitspike_unpack_span_f32`).
pub static BITSPIKE: KernelSource = KernelSource {
    name: "bitspike.cu",
    source: include_str!("bitspike.cu"),
    kernels: &[
        "bitspike_pack_f32",
        "bitspike_pack_f16",
        "bitspike_pack_bf16",
        "bitspike_unpack_f32",
        "bitspike_unpack_f16",
        "bitspike_unpack_bf16",
        "bitspike_unpack_span_f32",
    ],
};

/// Bool/U8 pack and unpack kernels (`bytes_{pack,unpack}_{f32,f16,bf16}`).
pub static BYTES: KernelSource = KernelSource {
    name: "bytes.cu",
    source: include_str!("bytes.cu"),
    kernels: &[
        "bytes_pack_f32",
        "bytes_pack_f16",
        "bytes_pack_bf16",
        "bytes_unpack_f32",
        "bytes_unpack_f16",
        "bytes_unpack_bf16",
    ],
};

/// Spike-count pack and unpack kernels of pooled f32 spikes (`counts_{pack,unpack}_f32`).
pub static COUNTS: KernelSource = KernelSource {
    name: "counts.cu",
    source: include_str!("counts.cu"),
    kernels: &["counts_pack_f32", "counts_unpack_f32"],
};

/// Every CUDA kernel source of this crate.
pub fn kernel_sources() -> [&'static KernelSource; 3] {
    [&BITSPIKE, &BYTES, &COUNTS]
}

/// Parameters of every pack kernel: `(const W* x, u64 n, u8* out, int check, u64* first_bad)`.
const PACK_PARAMS: &[(&str, ArgKind)] = &[
    ("x", ArgKind::Ptr),
    ("n", ArgKind::U64),
    ("out", ArgKind::Ptr),
    ("check", ArgKind::I32),
    ("first_bad", ArgKind::Ptr),
];

/// Parameters of every unpack kernel: `(const u8* in, u64 n, W* out)`.
const UNPACK_PARAMS: &[(&str, ArgKind)] = &[("in", ArgKind::Ptr), ("n", ArgKind::U64), ("out", ArgKind::Ptr)];

/// The signatures of three pack kernels and three unpack kernels, in that order.
macro_rules! pack_unpack_signatures {
    ($($pack:literal),*; $($unpack:literal),*) => {
        &[
            $(Signature { kernel: $pack, params: PACK_PARAMS },)*
            $(Signature { kernel: $unpack, params: UNPACK_PARAMS },)*
        ]
    };
}

/// Parameters of the span unpack kernel: `(const u8* in, u64 first, u64 n, f32* out)`.
const UNPACK_SPAN_PARAMS: &[(&str, ArgKind)] = &[
    ("in", ArgKind::Ptr),
    ("first", ArgKind::U64),
    ("n", ArgKind::U64),
    ("out", ArgKind::Ptr),
];

/// The signature of every kernel of [`BITSPIKE`].
pub static BITSPIKE_TABLE: KernelTable = KernelTable {
    source: &BITSPIKE,
    signatures: &[
        Signature {
            kernel: "bitspike_pack_f32",
            params: PACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_pack_f16",
            params: PACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_pack_bf16",
            params: PACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_unpack_f32",
            params: UNPACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_unpack_f16",
            params: UNPACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_unpack_bf16",
            params: UNPACK_PARAMS,
        },
        Signature {
            kernel: "bitspike_unpack_span_f32",
            params: UNPACK_SPAN_PARAMS,
        },
    ],
};

/// The signature of every kernel of [`BYTES`].
pub static BYTES_TABLE: KernelTable = KernelTable {
    source: &BYTES,
    signatures: pack_unpack_signatures!(
        "bytes_pack_f32", "bytes_pack_f16", "bytes_pack_bf16";
        "bytes_unpack_f32", "bytes_unpack_f16", "bytes_unpack_bf16"
    ),
};

/// The signature of every kernel of [`COUNTS`]: `(const float* x, u64 n, double window, u8*
/// out)` and `(const u8* in, u64 n, double window, float* out)`.
pub static COUNTS_TABLE: KernelTable = KernelTable {
    source: &COUNTS,
    signatures: &[
        Signature {
            kernel: "counts_pack_f32",
            params: &[
                ("x", ArgKind::Ptr),
                ("n", ArgKind::U64),
                ("window", ArgKind::F64),
                ("out", ArgKind::Ptr),
            ],
        },
        Signature {
            kernel: "counts_unpack_f32",
            params: &[
                ("in", ArgKind::Ptr),
                ("n", ArgKind::U64),
                ("window", ArgKind::F64),
                ("out", ArgKind::Ptr),
            ],
        },
    ],
};

/// Every kernel table of this crate, one per source of [`kernel_sources`].
pub fn kernel_tables() -> [&'static KernelTable; 3] {
    [&BITSPIKE_TABLE, &BYTES_TABLE, &COUNTS_TABLE]
}

/// The CUDA half of [`crate::SpikeCounts`]: `kernel` (`counts_pack_f32` or
/// `counts_unpack_f32`) over `n` values from `src` to `dst`, means over `window` spikes.
pub(crate) fn counts(
    gpu: CudaBackend,
    kernel: &'static str,
    src: CudaPtr,
    n: usize,
    window: u16,
    dst: CudaPtr,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let args = [
        KernelArg::Ptr(src),
        KernelArg::U64(n as u64),
        KernelArg::F64(window as f64),
        KernelArg::Ptr(dst),
    ];
    Ok(launch_kernel(gpu, &COUNTS_TABLE, kernel, grid(n as u64), &args)?)
}

/// Values per work item: a thread handles 8 values in the bit kernels (a warp 256 values per
/// iteration), 1 value in the byte kernels.
fn values_per_thread(kernels: &CudaKernels) -> u64 {
    if std::ptr::eq(kernels.table, &BITSPIKE_TABLE) {
        8
    } else {
        1
    }
}

/// A grid-stride launch over `items` work items: the grid depends on `items` only.
fn grid(items: u64) -> memopt_core::cuda::LaunchConfig {
    blocks(items.div_ceil(BLOCK_THREADS as u64).clamp(1, MAX_BLOCKS))
}

/// Sets the 8-byte status word at `status` to -1 (every byte 0xFF), queued on `gpu`'s stream
/// before the pack kernel that `atomicMin`s into it.
pub(crate) fn reset_status(gpu: CudaBackend, status: CudaPtr) -> Result<()> {
    let stream = gpu.stream()?;
    let err = |e: cudarc::driver::DriverError| -> CompressError {
        CoreError::Cuda {
            op: "resetting the binary check's status word",
            message: format!("GPU {}: {e}", gpu.ordinal),
        }
        .into()
    };
    stream.context().bind_to_thread().map_err(err)?;
    // SAFETY: `status` is the address of the caller's tracked 8-byte workspace buffer, held
    // across this call, on the same GPU and stream; 0xFF bytes are the i64 -1.
    unsafe { cudarc::driver::result::memset_d8_async(status.0, 0xFF, 8, stream.cu_stream()) }.map_err(err)
}

/// One pack launch: `n` values of `E` at `x` into the payload at `out`; with `status` (the
/// check), a value other than 0 and 1 is an error naming the first one.
pub(crate) struct PackLaunch {
    /// The input's first value.
    pub x: CudaPtr,
    /// Values.
    pub n: usize,
    /// The payload.
    pub out: CudaPtr,
    /// The status word (already -1), when the values are checked.
    pub status: Option<CudaPtr>,
    /// The compressor's name, for the error.
    pub compressor: &'static str,
}

/// The CUDA half of packing values of type `E`.
pub(crate) fn pack<E: SpikeElem>(gpu: CudaBackend, kernels: &CudaKernels, a: PackLaunch) -> Result<()> {
    if a.n > 0 {
        let items = (a.n as u64).div_ceil(values_per_thread(kernels));
        let args = [
            KernelArg::Ptr(a.x),
            KernelArg::U64(a.n as u64),
            KernelArg::Ptr(a.out),
            KernelArg::I32(a.status.is_some() as i32),
            KernelArg::Ptr(a.status.unwrap_or(CudaPtr(0))),
        ];
        let kernel = kernels.pack[CudaKernels::slot(E::DTYPE)];
        launch_kernel(gpu, kernels.table, kernel, grid(items), &args)?;
    }
    let Some(status) = a.status else { return Ok(()) };
    let first = read_back::<i64>(gpu, status, 1)?[0];
    if first < 0 {
        return Ok(());
    }
    let index = first as usize;
    let value = read_back::<E>(gpu, a.x.offset(index, E::DTYPE.size_in_bytes()), 1)?[0];
    Err(CompressError::NonBinary {
        compressor: a.compressor,
        index: index as u64,
        value: value.value_f64(),
    })
}

/// The CUDA half of unpacking `n` values of type `E` from the payload at `src` into `out`.
pub(crate) fn unpack<E: SpikeElem>(
    gpu: CudaBackend,
    kernels: &CudaKernels,
    src: CudaPtr,
    n: usize,
    out: CudaPtr,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Work items: packed bytes for the bit kernels (8 values each), values for the byte ones.
    let items = (n as u64).div_ceil(values_per_thread(kernels));
    let args = [KernelArg::Ptr(src), KernelArg::U64(n as u64), KernelArg::Ptr(out)];
    let kernel = kernels.unpack[CudaKernels::slot(E::DTYPE)];
    Ok(launch_kernel(gpu, kernels.table, kernel, grid(items), &args)?)
}

/// The CUDA half of unpacking `n` f32 values starting at bit `first` of the BitSpike payload
/// at `src` into `out` (spans that do not start on a byte; one thread per value).
pub(crate) fn unpack_span_f32(
    gpu: CudaBackend,
    src: CudaPtr,
    first: usize,
    n: usize,
    out: CudaPtr,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let args = [
        KernelArg::Ptr(src),
        KernelArg::U64(first as u64),
        KernelArg::U64(n as u64),
        KernelArg::Ptr(out),
    ];
    Ok(launch_kernel(
        gpu,
        &BITSPIKE_TABLE,
        "bitspike_unpack_span_f32",
        grid(n as u64),
        &args,
    )?)
}
