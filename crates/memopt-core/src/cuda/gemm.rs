//! Row-major f32 GEMM on a GPU through cuBLAS, for the CUDA halves of matmul, linear, conv2d
//! and batched products (strided-batched).
//!
//! Determinism: one cuBLAS handle per GPU, bound to the GPU's one stream ([`super::stream`]);
//! pedantic math (no TF32, no reduced-precision reductions); before every product the handle is
//! given the op's fixed, tracked workspace ([`crate::backend::gemm_workspace`], 4 MiB) with
//! `cublasSetWorkspace`, so cuBLAS never allocates behind the tracker and picks its algorithm
//! from the same workspace every time. cuBLAS gives the same bits for the same shapes, GPU model
//! and workspace, so a product's result does not depend on the plan around it.
//!
//! Row-major products use the transposition trick: row-major `C = A B` is column-major
//! `C^T = B^T A^T`, so cuBLAS is called with the operands swapped and `m`, `n` exchanged.

use super::CudaPtr;
use crate::backend::CudaBackend;
use crate::{CoreError, Result};
use cudarc::cublas::{CudaBlas, result as blas, sys};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const OP: &str = "cuBLAS GEMM";

/// A row-major f32 matrix on the GPU: `rows x cols`, row stride `ld` (elements), optionally
/// read transposed (then it is the transpose of the `cols x rows` matrix stored at `ptr`).
#[derive(Debug, Clone, Copy)]
pub struct GpuMat {
    /// Address of element (0, 0) of the stored matrix.
    pub ptr: CudaPtr,
    /// Rows of the matrix as used (after any transposition).
    pub rows: usize,
    /// Columns of the matrix as used.
    pub cols: usize,
    /// Row stride of the stored matrix, in elements.
    pub ld: usize,
    /// Whether the stored matrix is read transposed.
    pub trans: bool,
}

impl GpuMat {
    /// A `rows x cols` row-major matrix at `ptr` (row stride `cols`).
    pub fn row_major(ptr: CudaPtr, rows: usize, cols: usize) -> GpuMat {
        GpuMat {
            ptr,
            rows,
            cols,
            ld: cols,
            trans: false,
        }
    }

    /// The transpose (same memory).
    pub fn t(self) -> GpuMat {
        GpuMat {
            rows: self.cols,
            cols: self.rows,
            trans: !self.trans,
            ..self
        }
    }

    /// The cuBLAS operation that reads this matrix's stored column-major view as the
    /// transpose of the matrix used (the transposition trick).
    fn op(self) -> sys::cublasOperation_t {
        if self.trans {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    }
}

/// The GPU's cuBLAS handle (created once, on the GPU's stream, in pedantic math mode).
fn handle(gpu: CudaBackend) -> Result<Arc<CudaBlas>> {
    static HANDLES: Mutex<Option<HashMap<usize, Arc<CudaBlas>>>> = Mutex::new(None);
    // SAFETY: only tries to dlopen libcublas; no cuBLAS call is made (cudarc panics on a call
    // into an absent library, so this check must come first).
    if !unsafe { sys::is_culib_present() } {
        return Err(CoreError::CudaUnavailable {
            reason: "the cuBLAS library (libcublas.so.13) was not found, so matrix products \
                     cannot run on the GPU; install the CUDA 13 cuBLAS (pip install \
                     nvidia-cublas) and add its lib folder to LD_LIBRARY_PATH"
                .into(),
        });
    }
    // A panic while holding the lock leaves at worst a missing entry, which is rebuilt.
    let mut handles = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    let handles = handles.get_or_insert_with(HashMap::new);
    if let Some(h) = handles.get(&gpu.ordinal) {
        return Ok(h.clone());
    }
    let err = |e: blas::CublasError| CoreError::Cuda {
        op: OP,
        message: format!("creating the cuBLAS handle of GPU {}: {e:?}", gpu.ordinal),
    };
    let h = CudaBlas::new(gpu.stream()?).map_err(err)?;
    // SAFETY: a live handle; pedantic math forbids TF32 and reduced-precision reductions.
    unsafe { sys::cublasSetMathMode(*h.handle(), sys::cublasMath_t::CUBLAS_PEDANTIC_MATH) }
        .result()
        .map_err(err)?;
    let h = Arc::new(h);
    handles.insert(gpu.ordinal, h.clone());
    Ok(h)
}

fn c_int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        CoreError::invalid(
            OP,
            format!(
                "{what} = {v} exceeds cuBLAS's 32-bit sizes (at most {})",
                i32::MAX
            ),
        )
    })
}

/// What one cuBLAS product needs, checked before cuBLAS is touched: sizes in cuBLAS's integers
/// (column-major `C^T = B^T A^T`) and the text naming the product in errors.
struct Call {
    /// `(m, n, k)` of the column-major product.
    mnk: (i32, i32, i32),
    /// Leading dimensions of the column-major `B^T`, `A^T` and `C^T`.
    lds: (i32, i32, i32),
    what: String,
}

impl Call {
    /// The call for `dst = a * b` with row stride `dst_ld`; `None` when the product is empty.
    /// Sizes must agree (`a.cols == b.rows`; checked) and fit cuBLAS's 32-bit integers.
    fn new(gpu: CudaBackend, dst_ld: usize, a: GpuMat, b: GpuMat) -> Result<Option<Call>> {
        if a.cols != b.rows {
            return Err(CoreError::invalid(
                OP,
                format!(
                    "inner dimensions differ: {}x{} times {}x{}",
                    a.rows, a.cols, b.rows, b.cols
                ),
            ));
        }
        let (m, n, k) = (a.rows, b.cols, a.cols);
        if m == 0 || n == 0 {
            return Ok(None);
        }
        // Column-major C^T (n x m, ld dst_ld) = B^T (n x k) A^T (k x m).
        let mnk = (c_int(n, "columns")?, c_int(m, "rows")?, c_int(k, "inner size")?);
        // cuBLAS wants leading dimensions >= 1 even for an empty inner size (nothing is read).
        let ld = |v: usize| c_int(v.max(1), "a leading dimension");
        let lds = (ld(b.ld)?, ld(a.ld)?, ld(dst_ld)?);
        let what = format!("{m}x{k} times {k}x{n} on GPU {}", gpu.ordinal);
        Ok(Some(Call { mnk, lds, what }))
    }

    fn err(&self, e: blas::CublasError) -> CoreError {
        CoreError::Cuda {
            op: OP,
            message: format!("{}: {e:?}", self.what),
        }
    }

    /// The GPU's handle, bound to this thread, holding the op's tracked workspace (address,
    /// bytes), so cuBLAS allocates nothing of its own.
    fn bind(&self, gpu: CudaBackend, (workspace, bytes): (CudaPtr, usize)) -> Result<Arc<CudaBlas>> {
        let h = handle(gpu)?;
        gpu.stream()?
            .context()
            .bind_to_thread()
            .map_err(|e| CoreError::Cuda {
                op: OP,
                message: e.to_string(),
            })?;
        // SAFETY: a live handle; the workspace is the op's tracked buffer of `bytes` bytes,
        // held by the caller until the op returns (the stream orders its reuse).
        unsafe { sys::cublasSetWorkspace_v2(*h.handle(), workspace.0 as *mut _, bytes) }
            .result()
            .map_err(|e| self.err(e))?;
        Ok(h)
    }
}

/// `dst = a * b` (or `dst += a * b` with `accumulate`) on `gpu`, row-major, where `dst` is
/// `a.rows x b.cols` with row stride `dst_ld`, using the op's tracked `workspace` (address and
/// size in bytes). Sizes must agree (`a.cols == b.rows`; checked) and fit cuBLAS's 32-bit
/// integers (an error otherwise).
pub fn gemm(
    gpu: CudaBackend,
    workspace: (CudaPtr, usize),
    dst: CudaPtr,
    dst_ld: usize,
    a: GpuMat,
    b: GpuMat,
    accumulate: bool,
) -> Result<()> {
    let Some(call) = Call::new(gpu, dst_ld, a, b)? else {
        return Ok(());
    };
    let h = call.bind(gpu, workspace)?;
    let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
    let ((cm, cn, ck), (lda, ldb, ldc)) = (call.mnk, call.lds);
    // SAFETY: the handle is live and bound to the GPU's stream; a, b and dst are tracked views
    // of at least the sizes described (the caller validated the shapes); alpha and beta are
    // host scalars (default pointer mode).
    unsafe {
        blas::sgemm(
            *h.handle(),
            b.op(),
            a.op(),
            cm,
            cn,
            ck,
            &alpha,
            b.ptr.0 as *const f32,
            lda,
            a.ptr.0 as *const f32,
            ldb,
            &beta,
            dst.0 as *mut f32,
            ldc,
        )
    }
    .map_err(|e| call.err(e))
}

/// `count` products `dst[i] = a[i] * b[i]` in one strided-batched cuBLAS call: item `i` of an
/// operand starts `stride` elements after item `i - 1` (the first item as in [`gemm()`]). Sizes
/// are checked as in [`gemm()`], before cuBLAS is touched, also for `count` 0. cuBLAS gives the
/// same bits for the same shapes, count, strides, GPU model and workspace, so callers keep
/// `count` independent of the plan (one call per time step, say).
pub fn gemm_strided_batched(
    gpu: CudaBackend,
    workspace: (CudaPtr, usize),
    (dst, dst_ld, dst_stride): (CudaPtr, usize, usize),
    (a, a_stride): (GpuMat, usize),
    (b, b_stride): (GpuMat, usize),
    count: usize,
) -> Result<()> {
    let Some(call) = Call::new(gpu, dst_ld, a, b)? else {
        return Ok(());
    };
    let stride = |v: usize| {
        i64::try_from(v).map_err(|_| {
            CoreError::invalid(
                OP,
                format!("an item stride of {v} elements exceeds cuBLAS's 64-bit strides"),
            )
        })
    };
    let (sa, sb, sc) = (stride(b_stride)?, stride(a_stride)?, stride(dst_stride)?);
    let batch = c_int(count, "the batch count")?;
    if count == 0 {
        return Ok(());
    }
    let h = call.bind(gpu, workspace)?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let ((cm, cn, ck), (lda, ldb, ldc)) = (call.mnk, call.lds);
    // SAFETY: as in `gemm`, for each of the `count` items, whose operands lie `stride`
    // elements apart inside the tracked views the caller validated.
    unsafe {
        blas::sgemm_strided_batched(
            *h.handle(),
            b.op(),
            a.op(),
            cm,
            cn,
            ck,
            &alpha,
            b.ptr.0 as *const f32,
            lda,
            sa,
            a.ptr.0 as *const f32,
            ldb,
            sb,
            &beta,
            dst.0 as *mut f32,
            ldc,
            sc,
            batch,
        )
    }
    .map_err(|e| call.err(e))
}

/// The address and size of an op's GEMM workspace ([`crate::backend::gemm_workspace`]), which
/// the CUDA target always allocates; an error if it is missing.
pub fn workspace_of(ws: &mut Option<crate::KernelBuffer<u8>>) -> Result<(CudaPtr, usize)> {
    match ws {
        Some(w) => Ok((w.cuda_ptr()?, w.len())),
        None => Err(CoreError::invalid(
            OP,
            "no GEMM workspace was allocated (the CUDA target always allocates one)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mismatched inner sizes and sizes beyond 32 bits are refused before cuBLAS is touched.
    #[test]
    fn bad_sizes_are_errors_before_cublas() {
        let gpu = CudaBackend { ordinal: 0 };
        let (a, b) = (
            GpuMat::row_major(CudaPtr(0), 2, 3),
            GpuMat::row_major(CudaPtr(0), 4, 5),
        );
        let e = gemm(gpu, (CudaPtr(0), 0), CudaPtr(0), 5, a, b, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2x3") && e.contains("4x5"), "{e}");
        assert!(c_int(1 << 31, "rows").unwrap_err().to_string().contains("32-bit"));
        let t = GpuMat::row_major(CudaPtr(8), 2, 3).t();
        assert_eq!((t.rows, t.cols, t.ld, t.trans), (3, 2, 3, true));
        // Batched: the same checks, also when there are no items to multiply.
        for count in [0, 3] {
            let e = gemm_strided_batched(gpu, (CudaPtr(0), 0), (CudaPtr(0), 5, 10), (a, 6), (b, 20), count)
                .unwrap_err()
                .to_string();
            assert!(e.contains("2x3") && e.contains("4x5"), "{e}");
        }
        let big = gemm_strided_batched(
            gpu,
            (CudaPtr(0), 0),
            (CudaPtr(0), 3, 6),
            (GpuMat::row_major(CudaPtr(0), 2, 3), 6),
            (GpuMat::row_major(CudaPtr(0), 3, 3), 9),
            1 << 31,
        )
        .unwrap_err()
        .to_string();
        assert!(big.contains("batch count") && big.contains("32-bit"), "{big}");
    }
}
