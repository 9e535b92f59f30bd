//! Matrix products: [`matmul`], the fully connected layer [`linear`] (PyTorch weight layout) and
//! its backward [`linear_backward`], and attention's [`batched_matmul`], all on one shared GEMM (the `gemm` crate, on all rayon
//! threads for products of at least 2^20 multiply-adds).

mod accumulate;
mod batched;
mod chains;
mod gemm;
mod stepwise;
#[cfg(test)]
pub(crate) mod tests;

pub use batched::{Transposed, batched_matmul, batched_matmul_backward};
#[cfg(test)]
pub(crate) use gemm::GEMM_PAR_MIN_MACS;
pub(crate) use gemm::{GemmPar, MatRef, gemm_f32};
pub use stepwise::{LinearBackwardStepwise, linear_backward_stepwise, linear_stepwise};

use super::par::PAR_THRESHOLD;
use super::{GradNeeds, WeightGradAcc};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cpu_isa::CpuIsa;
use crate::cuda::gemm::{GpuMat, gemm, workspace_of};
use crate::cuda::grid_for;
use crate::cuda::launchers::conv as conv_k;
use crate::memory::MemoryKind;
use crate::{CoreError, DType, KernelBuffer, Result, Shape, Tensor};
use rayon::prelude::*;

/// Checks that every tensor is f32 and that all live on the first one's device.
pub(crate) fn check_f32_same_device(op: &'static str, tensors: &[&Tensor]) -> Result<()> {
    for t in tensors {
        t.expect_dtype(op, DType::F32)?;
    }
    if let Some((first, rest)) = tensors.split_first() {
        for t in rest {
            first.expect_same_device(op, t)?;
        }
    }
    Ok(())
}

/// `a [M, K] x b [K, N] -> [M, N]`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    const OP: &str = "matmul";
    check_f32_same_device(OP, &[a, b])?;
    let &[m, k] = a.dims() else {
        return Err(CoreError::shape(OP, "a matrix a of rank 2 [M, K]", a.shape()));
    };
    let &[kb, n] = b.dims() else {
        return Err(CoreError::shape(OP, "a matrix b of rank 2 [K, N]", b.shape()));
    };
    if kb != k {
        return Err(CoreError::shape(
            OP,
            format!("b with {k} rows to match a {}", a.shape()),
            b.shape(),
        ));
    }
    let (ar, br) = (a.read::<f32>(OP)?, b.read::<f32>(OP)?);
    let mut out = KernelBuffer::<f32>::new(OP, a.device(), m * n, MemoryKind::Activation, Init::Overwritten)?;
    let mut gemm_ws = gemm_workspace(OP, a.device())?;
    compute(a.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (ap, bp, op) = (ar.cuda_ptr()?, br.cuda_ptr()?, out.cuda_ptr()?);
            let (a, b) = (GpuMat::row_major(ap, m, k), GpuMat::row_major(bp, k, n));
            return gemm(gpu, workspace_of(&mut gemm_ws)?, op, n, a, b, false);
        }
        let (av, bv, o) = (ar.host()?, br.host()?, out.host_mut()?);
        gemm_f32(
            o,
            n,
            MatRef::row_major(av, m, k),
            MatRef::row_major(bv, k, n),
            false,
            GemmPar::Auto,
        );
        Ok(())
    })?;
    out.into_tensor([m, n])
}

/// Sizes of a linear layer: `M` rows (x's leading dimensions flattened), `K` inputs, `N` outputs.
struct LinearDims {
    m: usize,
    k: usize,
    n: usize,
}

fn linear_dims(op: &'static str, x: &Shape, w: &Tensor) -> Result<LinearDims> {
    let &[n, k] = w.dims() else {
        return Err(CoreError::shape(
            op,
            "a weight of rank 2 [out_features, in_features]",
            w.shape(),
        ));
    };
    match x.dims().last() {
        Some(&kx) if kx == k => Ok(LinearDims {
            m: x.dims()[..x.dims().len() - 1].iter().product(),
            k,
            n,
        }),
        _ => Err(CoreError::shape(
            op,
            format!("an input [.., {k}] (in_features of the weight {})", w.shape()),
            x,
        )),
    }
}

/// Validates a linear backward call (dtypes, devices, sizes, the output gradient's shape) and
/// returns its sizes.
fn backward_dims(op: &'static str, grad: &Tensor, x: &Tensor, w: &Tensor) -> Result<LinearDims> {
    check_f32_same_device(op, &[grad, x, w])?;
    grad_dims(op, grad, x.shape(), w)
}

/// Validates the sizes of a linear backward call with an input of shape `x` (dtypes and devices
/// are checked by the caller) and returns them.
fn grad_dims(op: &'static str, grad: &Tensor, x: &Shape, w: &Tensor) -> Result<LinearDims> {
    let dims = linear_dims(op, x, w)?;
    let out_dims = with_last(x, dims.n);
    if grad.dims() != out_dims.as_slice() {
        return Err(CoreError::shape(
            op,
            format!(
                "a gradient of the output's shape {}",
                crate::Shape::from(out_dims)
            ),
            grad.shape(),
        ));
    }
    Ok(dims)
}

fn check_bias(op: &'static str, b: &Tensor, n: usize) -> Result<()> {
    if b.dims() != [n] {
        return Err(CoreError::shape(
            op,
            format!("a bias of shape [{n}] (one per output)"),
            b.shape(),
        ));
    }
    Ok(())
}

/// x's shape with the last dimension replaced by `n`.
fn with_last(x: &Shape, n: usize) -> Vec<usize> {
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = n;
    }
    dims
}

/// `x [.., K] w^T + b`: x's leading dimensions are flattened to M rows, `w` is `[N, K]` (PyTorch
/// layout), `b` is `[N]`; the result is `[.., N]`. The rows fold `time_steps` time steps
/// (`[T, N, K]` or `[T*N, K]`; 1 for a plain batch): one GEMM per time step, so every GEMM has
/// the same shape whether the time steps run together or in chunks, and the results are
/// bit-identical either way.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, time_steps: usize) -> Result<Tensor> {
    const OP: &str = "linear";
    check_f32_same_device(OP, &[x, w])?;
    if let Some(b) = b {
        check_f32_same_device(OP, &[x, b])?;
    }
    let LinearDims { m, k, n } = linear_dims(OP, x.shape(), w)?;
    if let Some(b) = b {
        check_bias(OP, b, n)?;
    }
    let rows = rows_per_step(OP, m, time_steps)?;
    let (xr, wr) = (x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let br = b.map(|b| b.read::<f32>(OP)).transpose()?;
    let mut out = KernelBuffer::<f32>::new(OP, x.device(), m * n, MemoryKind::Activation, Init::Overwritten)?;
    let mut gemm_ws = gemm_workspace(OP, x.device())?;
    compute(x.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (xp, wp, op) = (xr.cuda_ptr()?, wr.cuda_ptr()?, out.cuda_ptr()?);
            let ws = workspace_of(&mut gemm_ws)?;
            let bias = br.as_ref().map(|b| b.cuda_ptr()).transpose()?;
            if let (Some(bp), true) = (bias, m * n > 0) {
                // Element i of the output starts as bias[i % n]; the GEMMs add into it.
                let (len, n64) = ((m * n) as u64, n as u64);
                conv_k::fill_bias_rows(gpu, grid_for(len), op, len, 1, bp, n64)?;
            }
            // One GEMM per time step, as the CPU: the same shapes however the steps are chunked.
            for t in 0..time_steps {
                let x_t = GpuMat::row_major(xp.add_f32(t * rows * k), rows, k);
                let w_t = GpuMat::row_major(wp, n, k).t();
                gemm(gpu, ws, op.add_f32(t * rows * n), n, x_t, w_t, bias.is_some())?;
            }
            return Ok(());
        }
        let (xs, ws, o) = (xr.host()?, wr.host()?, out.host_mut()?);
        match br.as_ref().map(|b| b.host()).transpose()? {
            Some(bias) => fill_rows(o, bias),
            None => o.fill(0.0),
        }
        // Every row's chains continue from its bias: one call over all time steps gives the
        // bits of one call per step (`chains`), so the time steps are not split here.
        chains::linear_forward(CpuIsa::selected(), xs, ws, o, m, k, n);
        Ok(())
    })?;
    out.into_tensor(with_last(x.shape(), n))
}

/// Rows per time step of `m` rows folding `time_steps` steps.
pub(crate) fn rows_per_step(op: &'static str, m: usize, time_steps: usize) -> Result<usize> {
    if time_steps == 0 || !m.is_multiple_of(time_steps) {
        return Err(CoreError::invalid(
            op,
            format!("time_steps = {time_steps} must be >= 1 and divide the {m} rows"),
        ));
    }
    Ok(m / time_steps)
}

/// Copies `row` into every row of `dst` (rows of `row.len()` elements).
fn fill_rows(dst: &mut [f32], row: &[f32]) {
    if row.is_empty() {
        return;
    }
    if dst.len() < PAR_THRESHOLD {
        dst.chunks_mut(row.len()).for_each(|d| d.copy_from_slice(row));
    } else {
        dst.par_chunks_mut(row.len()).for_each(|d| d.copy_from_slice(row));
    }
}

/// Gradients of [`linear`]; each is `None` when it was not asked for.
#[derive(Debug, Clone)]
pub struct LinearGrads {
    /// Gradient of the input, shaped like `x`.
    pub x: Option<Tensor>,
    /// Gradient of the weight, `[N, K]`.
    pub w: Option<Tensor>,
    /// Gradient of the bias, `[N]` (only with a bias).
    pub b: Option<Tensor>,
}

/// The arguments of [`linear_backward`].
#[derive(Debug, Clone, Copy)]
pub struct LinearBackward<'a> {
    /// Gradient of the output, `[.., N]`.
    pub grad: &'a Tensor,
    /// The forward's input, `[.., K]`.
    pub x: &'a Tensor,
    /// The forward's weight, `[N, K]`.
    pub w: &'a Tensor,
    /// Whether the forward had a bias (only then is a bias gradient computed).
    pub has_bias: bool,
    /// The gradients wanted. With `acc`, only `needs.input` is consulted.
    pub needs: GradNeeds,
    /// `None`: the weight and bias gradients are new tensors. `Some`: the rows fold
    /// `acc.time_steps` time steps and the weight and bias gradients are added into the
    /// accumulators of `acc`, time step `T-1` first, so that recomputing the time steps in
    /// chunks, last chunk first, gives bit-identical results; the returned `w` and `b` are then
    /// `None`.
    pub acc: Option<WeightGradAcc<'a>>,
}

/// Backward of [`linear`]. Computes (and allocates, in the order x, w, b, as
/// [`MemoryKind::Gradient`]) only the gradients `args.needs` asks for, the bias gradient only
/// when `args.has_bias`; with `args.acc`, adds the weight and bias gradients into its
/// accumulators instead (see [`LinearBackward::acc`]).
pub fn linear_backward(args: LinearBackward<'_>) -> Result<LinearGrads> {
    let LinearBackward {
        grad,
        x,
        w,
        has_bias,
        needs,
        acc,
    } = args;
    if let Some(acc) = acc {
        let gx = accumulate::linear_backward_acc(grad, x, w, acc, needs.input)?;
        return Ok(LinearGrads {
            x: gx,
            w: None,
            b: None,
        });
    }
    whole_backward(grad, x, w, has_bias, needs)
}

/// [`linear_backward`] without accumulators.
fn whole_backward(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    has_bias: bool,
    needs: GradNeeds,
) -> Result<LinearGrads> {
    const OP: &str = "linear_backward";
    let LinearDims { m, k, n } = backward_dims(OP, grad, x, w)?;
    let (gr, xr, wr) = (grad.read::<f32>(OP)?, x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let dev = x.device();
    let alloc = |need: bool, len: usize| {
        need.then(|| KernelBuffer::<f32>::new(OP, dev, len, MemoryKind::Gradient, Init::Overwritten))
            .transpose()
    };
    let mut gx = alloc(needs.input, m * k)?;
    let mut gw = alloc(needs.weight, n * k)?;
    let mut gb = alloc(needs.bias && has_bias, n)?;
    let mut gemm_ws = gemm_workspace(OP, dev)?;
    compute(dev, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (gp, xp, wp) = (gr.cuda_ptr()?, xr.cuda_ptr()?, wr.cuda_ptr()?);
            let ws = workspace_of(&mut gemm_ws)?;
            let g = GpuMat::row_major(gp, m, n);
            if let Some(o) = gx.as_mut().map(|b| b.cuda_ptr()).transpose()? {
                gemm(gpu, ws, o, k, g, GpuMat::row_major(wp, n, k), false)?;
            }
            if let Some(o) = gw.as_mut().map(|b| b.cuda_ptr()).transpose()? {
                gemm(gpu, ws, o, k, g.t(), GpuMat::row_major(xp, m, k), false)?;
            }
            if let (Some(o), true) = (gb.as_mut().map(|b| b.cuda_ptr()).transpose()?, n > 0) {
                // f64 column sums in row order, as the CPU's column_sums.
                conv_k::column_sums(gpu, grid_for(n as u64), gp, m as u64, n as u64, o, 0)?;
            }
            return Ok(());
        }
        let (gs, xs, ws) = (gr.host()?, xr.host()?, wr.host()?);
        let g = MatRef::row_major(gs, m, n);
        if let Some(o) = gx.as_mut().map(|b| b.host_mut()).transpose()? {
            gemm_f32(o, k, g, MatRef::row_major(ws, n, k), false, GemmPar::Auto);
        }
        if let Some(o) = gw.as_mut().map(|b| b.host_mut()).transpose()? {
            gemm_f32(o, k, g.t(), MatRef::row_major(xs, m, k), false, GemmPar::Auto);
        }
        if let Some(o) = gb.as_mut().map(|b| b.host_mut()).transpose()? {
            column_sums(gs, m, n, o);
        }
        Ok(())
    })?;
    Ok(LinearGrads {
        x: gx.map(|b| b.into_tensor(x.shape().clone())).transpose()?,
        w: gw.map(|b| b.into_tensor([n, k])).transpose()?,
        b: gb.map(|b| b.into_tensor([n])).transpose()?,
    })
}

/// Columns handled by one task of [`column_sums`].
const SUM_BLOCK: usize = 64;

/// `out[j] = sum_i src[i * cols + j]` for a row-major `rows x cols` matrix, accumulated in f64
/// in row order (the result does not depend on the thread count).
fn column_sums(src: &[f32], rows: usize, cols: usize, out: &mut [f32]) {
    let block = |(bi, o): (usize, &mut [f32])| {
        let j0 = bi * SUM_BLOCK;
        let mut acc = [0f64; SUM_BLOCK];
        for r in 0..rows {
            let row = &src[r * cols + j0..r * cols + j0 + o.len()];
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v as f64);
        }
        o.iter_mut().zip(acc).for_each(|(o, a)| *o = a as f32);
    };
    if rows * cols < PAR_THRESHOLD {
        out.chunks_mut(SUM_BLOCK).enumerate().for_each(block);
    } else {
        out.par_chunks_mut(SUM_BLOCK).enumerate().for_each(block);
    }
}
