//! The CUDA path: CUDA C kernels (compiled at run time by NVRTC through memopt-core's cache)
//! launched on [`memopt_core::Device::Cuda`] tensors. Without a driver, a GPU or NVRTC every
//! entry point returns a clear error.

use crate::binary::CudaKernels;
use crate::{CompressError, Packed, Result};
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use memopt_core::cuda::{KernelSource, cuda_function};
use memopt_core::storage::{CudaData, Element, Storage, StorageData};
use memopt_core::{CoreError, DType, Device, MemoryKind, Tensor};
use std::sync::Arc;

/// BitSpike pack and unpack kernels (`bitspike_{pack,unpack}_{f32,f16,bf16}`).
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

/// Every CUDA kernel source of this crate.
pub fn kernel_sources() -> [&'static KernelSource; 2] {
    [&BITSPIKE, &BYTES]
}

/// Threads per block of every kernel here.
const BLOCK: u32 = 256;
/// Most blocks launched; kernels loop over the rest (grid-stride).
const MAX_BLOCKS: u64 = 16 * 1024;

fn config(work_items: u64, per_block: u64) -> LaunchConfig {
    let blocks = work_items.div_ceil(per_block).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn driver(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CompressError {
    move |e| {
        CoreError::Cuda {
            op,
            message: e.to_string(),
        }
        .into()
    }
}

/// Values per pack work item: a thread handles 8 values in the bit kernel (a warp 256 values
/// per iteration), 1 value in the byte kernel.
fn values_per_thread(src: &KernelSource) -> u64 {
    if std::ptr::eq(src, &BITSPIKE) { 8 } else { 1 }
}

/// Packs CUDA tensor `x` into a new tracked payload of `len` bytes with `kernels`; with
/// `check`, a value other than 0 and 1 is an error naming the first one. Allocates the payload
/// and (with `check`) the 8-byte status word, in the same order as the CPU.
pub(crate) fn pack(
    x: &Tensor,
    ordinal: usize,
    kernels: &CudaKernels,
    len: usize,
    check: bool,
    compressor: &'static str,
) -> Result<Tensor> {
    const OP: &str = "compressing on the GPU";
    let func = cuda_function(
        ordinal,
        kernels.source,
        kernels.pack[CudaKernels::slot(x.dtype())],
    )?;
    let stream = memopt_core::cuda::stream(ordinal)?;
    let n = x.elem_count();
    let device = Device::Cuda(ordinal);
    // Blocks of the GPU's caching allocator; the kernel writes every payload byte.
    let payload = Arc::new(Storage::for_overwrite(
        DType::U8,
        len,
        device,
        MemoryKind::Packed,
    )?);
    let status = match check {
        true => Some(Storage::upload(
            &<i64 as Element>::into_cpu(vec![-1i64]),
            ordinal,
            MemoryKind::Workspace,
        )?),
        false => None,
    };
    if n > 0 {
        let cfg = config(n as u64, BLOCK as u64 * values_per_thread(kernels.source));
        let input = x.storage().read();
        let mut out = payload.write();
        let mut status_guard = status.as_ref().map(|s| s.write());
        let StorageData::Cuda(CudaData::U8(out)) = &mut *out else {
            unreachable!("the payload was just created as GPU bytes")
        };
        let status = match status_guard.as_deref_mut() {
            Some(StorageData::Cuda(CudaData::I64(s))) => Some(&mut **s),
            _ => None,
        };
        let range = x.storage_offset()..x.storage_offset() + n;
        let args = PackArgs {
            n,
            out,
            check,
            status,
            cfg,
        };
        match &*input {
            StorageData::Cuda(CudaData::F32(s)) => launch_pack(&stream, &func, s, range, args)?,
            StorageData::Cuda(CudaData::F16(s)) => launch_pack(&stream, &func, s, range, args)?,
            StorageData::Cuda(CudaData::BF16(s)) => launch_pack(&stream, &func, s, range, args)?,
            _ => return Err(not_gpu_float(compressor, x.dtype())),
        }
    }
    if let Some(s) = &status {
        let first = match &*s.read() {
            StorageData::Cuda(CudaData::I64(s)) => stream.clone_dtoh(&**s).map_err(driver(OP))?[0],
            _ => -1,
        };
        if first >= 0 {
            return Err(CompressError::NonBinary {
                compressor,
                index: first as u64,
                value: value_at(x, &stream, first as usize)?,
            });
        }
    }
    Ok(Tensor::from_storage(payload, [len])?)
}

struct PackArgs<'a> {
    n: usize,
    out: &'a mut CudaSlice<u8>,
    check: bool,
    status: Option<&'a mut CudaSlice<i64>>,
    cfg: LaunchConfig,
}

fn launch_pack<T>(
    stream: &Arc<CudaStream>,
    func: &cudarc::driver::CudaFunction,
    input: &CudaSlice<T>,
    range: std::ops::Range<usize>,
    a: PackArgs<'_>,
) -> Result<()> {
    let view = input.slice(range);
    let n = a.n as u64;
    let check = a.check as i32;
    let null = 0u64;
    let mut b = stream.launch_builder(func);
    b.arg(&view).arg(&n).arg(a.out).arg(&check);
    match a.status {
        Some(s) => b.arg(s),
        None => b.arg(&null),
    };
    // SAFETY: the arguments match the kernel signature (const W* x, u64 n, u8* out, int check,
    // u64* first_bad): `view` holds n values of the kernel's dtype (chosen from the tensor's
    // dtype), `out` holds the payload length the kernel writes, and first_bad is only used
    // with `check`.
    unsafe { b.launch(a.cfg) }.map_err(driver("launching a pack kernel"))?;
    Ok(())
}

/// The value at row-major `index` of CUDA tensor `x`, as f64 (for error messages).
fn value_at(x: &Tensor, stream: &Arc<CudaStream>, index: usize) -> Result<f64> {
    const OP: &str = "reading a value back from the GPU";
    let i = x.storage_offset() + index;
    Ok(match &*x.storage().read() {
        StorageData::Cuda(CudaData::F32(s)) => {
            stream.clone_dtoh(&s.slice(i..i + 1)).map_err(driver(OP))?[0] as f64
        }
        StorageData::Cuda(CudaData::F16(s)) => {
            stream.clone_dtoh(&s.slice(i..i + 1)).map_err(driver(OP))?[0].to_f64()
        }
        StorageData::Cuda(CudaData::BF16(s)) => {
            stream.clone_dtoh(&s.slice(i..i + 1)).map_err(driver(OP))?[0].to_f64()
        }
        _ => f64::NAN,
    })
}

fn not_gpu_float(compressor: &'static str, dtype: DType) -> CompressError {
    CompressError::WrongDType {
        compressor,
        got: dtype,
        accepted: crate::compressor::FLOAT_DTYPES,
    }
}

/// Unpacks a CUDA payload made with `kernels` into a new tracked tensor of the original shape
/// and dtype (kind activation).
pub(crate) fn unpack(packed: &Packed, ordinal: usize, kernels: &CudaKernels) -> Result<Tensor> {
    let func = cuda_function(
        ordinal,
        kernels.source,
        kernels.unpack[CudaKernels::slot(packed.dtype())],
    )?;
    let stream = memopt_core::cuda::stream(ordinal)?;
    let n = packed.shape().elem_count();
    let dtype = packed.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(not_gpu_float(packed.kind().name(), dtype));
    }
    // A block of the GPU's caching allocator; the kernel writes every value.
    let storage = Storage::for_overwrite(dtype, n, Device::Cuda(ordinal), MemoryKind::Activation)?;
    if n > 0 {
        let mut out_guard = storage.write();
        let StorageData::Cuda(out) = &mut *out_guard else {
            unreachable!("a storage on a CUDA device holds GPU data")
        };
        let payload = packed.payload();
        let guard = payload.storage().read();
        let StorageData::Cuda(CudaData::U8(src)) = &*guard else {
            return Err(
                CoreError::invalid("decompressing on the GPU", "the payload is not GPU bytes").into(),
            );
        };
        let off = payload.storage_offset();
        let view = src.slice(off..off + payload.elem_count());
        // Work items: packed bytes for the bit kernel (8 values each), values for the byte one.
        let items = (n as u64).div_ceil(values_per_thread(kernels.source));
        let cfg = config(items, BLOCK as u64);
        let n64 = n as u64;
        let mut b = stream.launch_builder(&func);
        b.arg(&view).arg(&n64);
        match out {
            CudaData::F32(o) => b.arg(&mut **o),
            CudaData::F16(o) => b.arg(&mut **o),
            CudaData::BF16(o) => b.arg(&mut **o),
            _ => unreachable!("allocated as a float above"),
        };
        // SAFETY: the arguments match (const u8* in, u64 n, W* out): `view` holds the payload
        // the pack kernel wrote for n values and `out` holds n values of the kernel's dtype.
        unsafe { b.launch(cfg) }.map_err(driver("launching an unpack kernel"))?;
    }
    Ok(Tensor::from_storage(Arc::new(storage), packed.shape().clone())?)
}
