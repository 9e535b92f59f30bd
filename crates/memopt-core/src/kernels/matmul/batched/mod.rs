//! Batched matrix products, as attention needs them: `op(a) x op(b)` for every item of the
//! leading (batch) dimensions the operands share, each operand read as stored or transposed
//! (its last two dimensions swapped). On the CPU every item is one product of the shared GEMM,
//! so an item's bits are those of a 2-D product of its shape, whatever the batch. On the GPU
//! the items of each index of the first leading dimension (a time step of `[T, N, ..]`) are
//! one strided-batched cuBLAS call, so a time-chunked segment makes the same calls as the
//! whole step (shapes, count and strides; the groups' addresses keep their 16-byte alignment
//! when a time step's items span a multiple of 4 values, as attention's do).

use super::check_f32_same_device;
use super::gemm::{GemmPar, MatRef, gemm_f32};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cuda::CudaPtr;
use crate::cuda::gemm::{GpuMat, gemm_strided_batched, workspace_of};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Shape, Tensor};
use rayon::prelude::*;

#[cfg(test)]
mod tests;

/// Which operands of a [`batched_matmul`] are read transposed (last two dimensions swapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Transposed {
    /// `a` is read as its transpose.
    pub a: bool,
    /// `b` is read as its transpose.
    pub b: bool,
}

/// One operand as stored: `rows x cols` per item, read transposed or not.
#[derive(Debug, Clone, Copy)]
struct Operand {
    rows: usize,
    cols: usize,
    transposed: bool,
}

impl Operand {
    /// Elements of one item.
    fn len(self) -> usize {
        self.rows * self.cols
    }

    /// Rows and columns as read.
    fn read(self) -> (usize, usize) {
        if self.transposed {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }

    /// Item `i` of `data` as read.
    fn host(self, data: &[f32], i: usize) -> MatRef<'_> {
        let m = MatRef::row_major(&data[i * self.len()..(i + 1) * self.len()], self.rows, self.cols);
        if self.transposed { m.t() } else { m }
    }

    /// Item `i` at `ptr` as read.
    fn gpu(self, ptr: CudaPtr, i: usize) -> GpuMat {
        let m = GpuMat::row_major(ptr.add_f32(i * self.len()), self.rows, self.cols);
        if self.transposed { m.t() } else { m }
    }
}

/// The sizes of a batched product: items, the operands, and the output's dimensions.
struct Dims {
    batch: usize,
    /// Items per index of the first leading dimension (all of them when there is none): the
    /// count of one strided-batched GPU call.
    per_group: usize,
    a: Operand,
    b: Operand,
    out: Vec<usize>,
}

impl Dims {
    /// The first item of each strided-batched GPU call.
    fn group_starts(&self) -> impl Iterator<Item = usize> {
        (0..self.batch).step_by(self.per_group.max(1))
    }

    /// `(M, K, N)`: `op(a)` is `M x K`, `op(b)` is `K x N`.
    fn mkn(&self) -> (usize, usize, usize) {
        let ((m, k), (_, n)) = (self.a.read(), self.b.read());
        (m, k, n)
    }
}

/// The last two dimensions of `x` and its leading ones, or the error for a rank under 2.
fn split(op: &'static str, name: &str, x: &Shape) -> Result<(usize, usize, Vec<usize>)> {
    match x.dims() {
        [lead @ .., rows, cols] => Ok((*rows, *cols, lead.to_vec())),
        _ => Err(CoreError::shape(
            op,
            format!("{name} of rank 2 or more [.., rows, cols]"),
            x,
        )),
    }
}

fn dims(op: &'static str, a: &Shape, b: &Shape, t: Transposed) -> Result<Dims> {
    let (ar, ac, lead) = split(op, "a", a)?;
    let (br, bc, lead_b) = split(op, "b", b)?;
    if lead != lead_b {
        return Err(CoreError::shape(
            op,
            format!("b with the leading (batch) dimensions {lead:?} of a {a}"),
            b,
        ));
    }
    let ao = Operand {
        rows: ar,
        cols: ac,
        transposed: t.a,
    };
    let bo = Operand {
        rows: br,
        cols: bc,
        transposed: t.b,
    };
    let ((m, k), (kb, n)) = (ao.read(), bo.read());
    if kb != k {
        let how = if t.b { "columns" } else { "rows" };
        return Err(CoreError::shape(
            op,
            format!("b with {k} {how}, the inner dimension of a {a} as read"),
            b,
        ));
    }
    let batch = lead.iter().product();
    let per_group = lead.get(1..).map_or(1, |rest| rest.iter().product());
    let mut out = lead;
    out.extend([m, n]);
    Ok(Dims {
        batch,
        per_group,
        a: ao,
        b: bo,
        out,
    })
}

/// `dst[i] = x[i] * y[i]` for every item `i` (each `rows x cols` of `dst` row-major): one
/// product per item, on its own thread when items are small, with all threads when they are
/// big (the choice depends on the sizes only).
fn host_products<'a>(
    dst: &mut [f32],
    (rows, cols, inner): (usize, usize, usize),
    x: impl Fn(usize) -> MatRef<'a> + Sync,
    y: impl Fn(usize) -> MatRef<'a> + Sync,
) {
    let item = rows * cols;
    if item == 0 {
        return;
    }
    match GemmPar::for_size(rows * cols * inner) {
        GemmPar::Auto => {
            for (i, d) in dst.chunks_mut(item).enumerate() {
                gemm_f32(d, cols, x(i), y(i), false, GemmPar::Auto);
            }
        }
        GemmPar::Serial => dst
            .par_chunks_mut(item)
            .enumerate()
            .for_each(|(i, d)| gemm_f32(d, cols, x(i), y(i), false, GemmPar::Serial)),
    }
}

/// `op(a) [.., M, K] x op(b) [.., K, N] -> [.., M, N]`, where `op` transposes the operands
/// `transposed` names and the leading dimensions of `a` and `b` must be equal: one product per
/// item. Q K^T of attention is `batched_matmul(q, k, Transposed { a: false, b: true })`.
pub fn batched_matmul(a: &Tensor, b: &Tensor, transposed: Transposed) -> Result<Tensor> {
    const OP: &str = "batched_matmul";
    check_f32_same_device(OP, &[a, b])?;
    let d = dims(OP, a.shape(), b.shape(), transposed)?;
    let (m, k, n) = d.mkn();
    let (ar, br) = (a.read::<f32>(OP)?, b.read::<f32>(OP)?);
    let mut out = KernelBuffer::<f32>::new(
        OP,
        a.device(),
        d.batch * m * n,
        MemoryKind::Activation,
        Init::Overwritten,
    )?;
    let mut gemm_ws = gemm_workspace(OP, a.device())?;
    compute(a.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (ap, bp, op) = (ar.cuda_ptr()?, br.cuda_ptr()?, out.cuda_ptr()?);
            let ws = workspace_of(&mut gemm_ws)?;
            for i in d.group_starts() {
                gemm_strided_batched(
                    gpu,
                    ws,
                    (op.add_f32(i * m * n), n, m * n),
                    (d.a.gpu(ap, i), d.a.len()),
                    (d.b.gpu(bp, i), d.b.len()),
                    d.per_group,
                )?;
            }
            return Ok(());
        }
        let (av, bv, o) = (ar.host()?, br.host()?, out.host_mut()?);
        host_products(o, (m, n, k), |i| d.a.host(av, i), |i| d.b.host(bv, i));
        Ok(())
    })?;
    out.into_tensor(d.out)
}

/// The gradients of [`batched_matmul`]'s operands, in their stored shapes, given the output's
/// gradient `grad` (`[.., M, N]`): `a`'s when `needs.0`, `b`'s when `needs.1`. With
/// `C = op(A) op(B)`: `d op(A) = dC op(B)^T` and `d op(B) = op(A)^T dC`, each written in the
/// operand's stored layout (a transposed operand's gradient is the transpose).
pub fn batched_matmul_backward(
    grad: &Tensor,
    a: &Tensor,
    b: &Tensor,
    transposed: Transposed,
    needs: (bool, bool),
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    const OP: &str = "batched_matmul_backward";
    check_f32_same_device(OP, &[grad, a, b])?;
    let d = dims(OP, a.shape(), b.shape(), transposed)?;
    if grad.dims() != d.out.as_slice() {
        return Err(CoreError::shape(
            OP,
            format!("a gradient of the output's shape {}", Shape::from(d.out.clone())),
            grad.shape(),
        ));
    }
    let (m, _, n) = d.mkn();
    let gr = grad.read::<f32>(OP)?;
    let (ar, br) = (a.read::<f32>(OP)?, b.read::<f32>(OP)?);
    let new = |needed: bool, len: usize| {
        needed
            .then(|| KernelBuffer::<f32>::new(OP, a.device(), len, MemoryKind::Gradient, Init::Overwritten))
            .transpose()
    };
    let (mut ga, mut gb) = (new(needs.0, a.elem_count())?, new(needs.1, b.elem_count())?);
    let mut gemm_ws = gemm_workspace(OP, a.device())?;
    let g_op = Operand {
        rows: m,
        cols: n,
        transposed: false,
    };
    compute(a.device(), |backend| {
        // d op(A) [M, K] = dC [M, N] x op(B)^T [N, K]; stored transposed: op(B) x dC^T.
        // d op(B) [K, N] = op(A)^T [K, M] x dC [M, N]; stored transposed: dC^T x op(A).
        if let Compute::Cuda(gpu) = backend {
            let (gp, ap, bp) = (gr.cuda_ptr()?, ar.cuda_ptr()?, br.cuda_ptr()?);
            let ws = workspace_of(&mut gemm_ws)?;
            if let Some(ga) = ga.as_mut() {
                let dst = ga.cuda_ptr()?;
                for i in d.group_starts() {
                    let (g, bm) = ((g_op.gpu(gp, i), g_op.len()), (d.b.gpu(bp, i), d.b.len()));
                    let (x, y) = if d.a.transposed {
                        (bm, (g.0.t(), g.1))
                    } else {
                        (g, (bm.0.t(), bm.1))
                    };
                    let out = (dst.add_f32(i * d.a.len()), d.a.cols, d.a.len());
                    gemm_strided_batched(gpu, ws, out, x, y, d.per_group)?;
                }
            }
            if let Some(gb) = gb.as_mut() {
                let dst = gb.cuda_ptr()?;
                for i in d.group_starts() {
                    let (g, am) = ((g_op.gpu(gp, i), g_op.len()), (d.a.gpu(ap, i), d.a.len()));
                    let (x, y) = if d.b.transposed {
                        ((g.0.t(), g.1), am)
                    } else {
                        ((am.0.t(), am.1), g)
                    };
                    let out = (dst.add_f32(i * d.b.len()), d.b.cols, d.b.len());
                    gemm_strided_batched(gpu, ws, out, x, y, d.per_group)?;
                }
            }
            return Ok(());
        }
        let (gv, av, bv) = (gr.host()?, ar.host()?, br.host()?);
        if let Some(ga) = ga.as_mut() {
            let (rows, cols) = (d.a.rows, d.a.cols);
            let g = |i| g_op.host(gv, i);
            let bm = |i| d.b.host(bv, i);
            if d.a.transposed {
                host_products(ga.host_mut()?, (rows, cols, n), bm, |i| g(i).t());
            } else {
                host_products(ga.host_mut()?, (rows, cols, n), g, |i| bm(i).t());
            }
        }
        if let Some(gb) = gb.as_mut() {
            let (rows, cols) = (d.b.rows, d.b.cols);
            let g = |i| g_op.host(gv, i);
            let am = |i| d.a.host(av, i);
            if d.b.transposed {
                host_products(gb.host_mut()?, (rows, cols, m), |i| g(i).t(), am);
            } else {
                host_products(gb.host_mut()?, (rows, cols, m), |i| am(i).t(), g);
            }
        }
        Ok(())
    })?;
    let ga = ga.map(|g| g.into_tensor(a.dims().to_vec())).transpose()?;
    let gb = gb.map(|g| g.into_tensor(b.dims().to_vec())).transpose()?;
    Ok((ga, gb))
}
