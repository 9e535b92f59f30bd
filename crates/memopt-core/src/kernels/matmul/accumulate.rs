//! linear backward that accumulates the weight and bias gradients one time step at a time.

use super::{GemmPar, LinearDims, MatRef, backward_dims, column_sums, gemm_f32};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cuda::gemm::{GpuMat, gemm, workspace_of};
use crate::cuda::grid_for;
use crate::cuda::launchers::conv as conv_k;
use crate::kernels::WeightGradAcc;
use crate::memory::MemoryKind;
use crate::{KernelBuffer, Result, Tensor};

/// [`super::linear_backward`] with accumulators: backward of [`super::linear`] whose rows fold `acc.time_steps` time steps (`[T, N, K]` or
/// `[T*N, K]` inputs). Adds the weight and bias gradients into the accumulators of `acc`, time
/// step `T-1` first, and returns the input gradient when `input` is set (one GEMM per time
/// step). Recomputing the time steps in chunks, last chunk first, gives bit-identical results.
pub(super) fn linear_backward_acc(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    acc: WeightGradAcc<'_>,
    input: bool,
) -> Result<Option<Tensor>> {
    const OP: &str = "linear_backward_acc";
    let LinearDims { m, k, n } = backward_dims(OP, grad, x, w)?;
    let rows = acc.check(OP, w.dims(), n, m, &[grad, x, w])?;
    let (gr, xr, wr) = (grad.read::<f32>(OP)?, x.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let mut gx = input
        .then(|| KernelBuffer::<f32>::new(OP, x.device(), m * k, MemoryKind::Gradient, Init::Overwritten))
        .transpose()?;
    let mut wacc = acc.weight.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut bacc = acc.bias.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut gemm_ws = gemm_workspace(OP, x.device())?;
    compute(x.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (gp, xp, wp) = (gr.cuda_ptr()?, xr.cuda_ptr()?, wr.cuda_ptr()?);
            let ws = workspace_of(&mut gemm_ws)?;
            if let Some(o) = gx.as_mut().map(|b| b.cuda_ptr()).transpose()? {
                let (g, w) = (GpuMat::row_major(gp, m, n), GpuMat::row_major(wp, n, k));
                gemm(gpu, ws, o, k, g, w, false)?;
            }
            let aw = wacc.as_mut().map(|a| a.cuda_ptr()).transpose()?;
            let ab = bacc.as_mut().map(|a| a.cuda_ptr()).transpose()?;
            // Time step T-1 first, each added into the accumulators (the CPU's order).
            for t in (0..acc.time_steps).rev() {
                let g_t = gp.add_f32(t * rows * n);
                if let Some(aw) = aw {
                    let x_t = GpuMat::row_major(xp.add_f32(t * rows * k), rows, k);
                    gemm(gpu, ws, aw, k, GpuMat::row_major(g_t, rows, n).t(), x_t, true)?;
                }
                if let (Some(ab), true) = (ab, n > 0) {
                    // The step's f64 column sums rounded to f32, then added: as the CPU.
                    conv_k::column_sums(gpu, grid_for(n as u64), g_t, rows as u64, n as u64, ab, 1)?;
                }
            }
            return Ok(());
        }
        let (gs, xs, ws) = (gr.host()?, xr.host()?, wr.host()?);
        if let Some(o) = gx.as_mut().map(|b| b.host_mut()).transpose()? {
            gemm_f32(
                o,
                k,
                MatRef::row_major(gs, m, n),
                MatRef::row_major(ws, n, k),
                false,
                GemmPar::Auto,
            );
        }
        let mut partial = vec![0f32; n];
        for t in (0..acc.time_steps).rev() {
            let g_t = &gs[t * rows * n..][..rows * n];
            if let Some(aw) = wacc.as_mut().map(|a| a.host_mut()).transpose()? {
                let x_t = MatRef::row_major(&xs[t * rows * k..], rows, k);
                gemm_f32(
                    aw,
                    k,
                    MatRef::row_major(g_t, rows, n).t(),
                    x_t,
                    true,
                    GemmPar::Auto,
                );
            }
            if let Some(ab) = bacc.as_mut().map(|a| a.host_mut()).transpose()? {
                column_sums(g_t, rows, n, &mut partial);
                ab.iter_mut().zip(&partial).for_each(|(a, &s)| *a += s);
            }
        }
        Ok(())
    })?;
    drop((wacc, bacc));
    gx.map(|b| b.into_tensor(x.shape().clone())).transpose()
}
