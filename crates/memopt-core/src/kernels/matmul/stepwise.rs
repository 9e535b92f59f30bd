//! linear and its accumulating backward on an input read one time step at a time
//! ([`StepInput`]): each step's rows are written into a one-step buffer and multiplied by the
//! same GEMM as in [`super::linear`] (one per time step), so the results are bit-identical while
//! only one step of the input ever exists as f32.

use super::{
    GemmPar, LinearDims, MatRef, check_bias, check_f32_same_device, column_sums, fill_rows, gemm_f32,
    grad_dims, linear_dims, rows_per_step, with_last,
};
use crate::backend::{Compute, Init, compute, gemm_workspace};
use crate::cuda::gemm::{GpuMat, gemm, workspace_of};
use crate::cuda::grid_for;
use crate::cuda::launchers::conv as conv_k;
use crate::kernels::WeightGradAcc;
use crate::kernels::step_input::{StepInput, check_step_device, steps_first_to_last, steps_last_to_first};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};

/// Elements of one time step's rows (`rows x k`).
fn step_len(op: &'static str, rows: usize, k: usize) -> Result<usize> {
    rows.checked_mul(k).ok_or_else(|| {
        CoreError::invalid(
            op,
            "one time step of the input has more elements than fit in usize",
        )
    })
}

/// [`super::linear`] of an input read one time step at a time: `x [.., K]` whose rows fold
/// `time_steps` steps, `w [N, K]`, `b [N]`, giving `[.., N]`. Allocates, in this order, the
/// output ([`MemoryKind::Activation`]), one time step of the input (`rows x K` f32,
/// [`MemoryKind::Workspace`]) and the GEMM workspace, freed before returning. Bit-identical to
/// [`super::linear`] on the same values.
pub fn linear_stepwise(
    x: &dyn StepInput,
    w: &Tensor,
    b: Option<&Tensor>,
    time_steps: usize,
) -> Result<Tensor> {
    const OP: &str = "linear_stepwise";
    check_f32_same_device(OP, &[w])?;
    if let Some(b) = b {
        check_f32_same_device(OP, &[w, b])?;
    }
    check_step_device(OP, x, w)?;
    let LinearDims { m, k, n } = linear_dims(OP, x.shape(), w)?;
    if let Some(b) = b {
        check_bias(OP, b, n)?;
    }
    let rows = rows_per_step(OP, m, time_steps)?;
    let in_step = step_len(OP, rows, k)?;
    let device = x.device();
    let wr = w.read::<f32>(OP)?;
    let br = b.map(|b| b.read::<f32>(OP)).transpose()?;
    let mut out = KernelBuffer::<f32>::new(OP, device, m * n, MemoryKind::Activation, Init::Overwritten)?;
    let mut x_t = KernelBuffer::<f32>::workspace(OP, device, in_step, Init::Overwritten)?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    // Every row of the output starts as the bias; each step's GEMM adds into its rows.
    compute(device, |backend| {
        let Some(br) = br.as_ref() else {
            // The CPU's chains continue from the output's values.
            if let Compute::Cpu = backend {
                out.host_mut()?.fill(0.0);
            }
            return Ok(());
        };
        if let Compute::Cuda(gpu) = backend {
            if m * n > 0 {
                let (len, n64) = ((m * n) as u64, n as u64);
                conv_k::fill_bias_rows(gpu, grid_for(len), out.cuda_ptr()?, len, 1, br.cuda_ptr()?, n64)?;
            }
            return Ok(());
        }
        fill_rows(out.host_mut()?, br.host()?);
        Ok(())
    })?;
    for t in steps_first_to_last(device, time_steps) {
        x.write_span(OP, t * in_step, &mut x_t)?;
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let ws = workspace_of(&mut gemm_ws)?;
                let x_m = GpuMat::row_major(x_t.cuda_ptr()?, rows, k);
                let w_m = GpuMat::row_major(wr.cuda_ptr()?, n, k).t();
                return gemm(
                    gpu,
                    ws,
                    out.cuda_ptr()?.add_f32(t * rows * n),
                    n,
                    x_m,
                    w_m,
                    b.is_some(),
                );
            }
            let (ws, o) = (wr.host()?, out.host_mut()?);
            let o = &mut o[t * rows * n..][..rows * n];
            super::chains::linear_forward(crate::CpuIsa::selected(), x_t.host_mut()?, ws, o, rows, k, n);
            Ok(())
        })?;
    }
    drop((x_t, gemm_ws));
    out.into_tensor(with_last(x.shape(), n))
}

/// The arguments of [`linear_backward_stepwise`].
#[derive(Clone, Copy)]
pub struct LinearBackwardStepwise<'a> {
    /// Gradient of the output, `[.., N]`.
    pub grad: &'a Tensor,
    /// The forward's input, `[.., K]`, read one time step at a time.
    pub x: &'a dyn StepInput,
    /// The forward's weight, `[N, K]`.
    pub w: &'a Tensor,
    /// Whether the input gradient is wanted.
    pub input: bool,
    /// The weight and bias gradient accumulators and the time steps the rows fold.
    pub acc: WeightGradAcc<'a>,
}

/// [`super::linear_backward`] with accumulators ([`super::LinearBackward::acc`]) for an input
/// read one time step at a time. Returns the input gradient when `args.input` is set (one GEMM
/// over all rows, which reads no input values) and adds the weight and bias gradients into the
/// accumulators, time step `T-1` first, unpacking each step's rows into a one-step buffer just
/// before its weight gradient. Allocates, in this order, the input gradient, the one-step input
/// buffer (only when the weight gradient is wanted) and the GEMM workspace. Bit-identical to the
/// dense backward.
pub fn linear_backward_stepwise(args: LinearBackwardStepwise<'_>) -> Result<Option<Tensor>> {
    const OP: &str = "linear_backward_stepwise";
    let LinearBackwardStepwise {
        grad,
        x,
        w,
        input,
        acc,
    } = args;
    check_f32_same_device(OP, &[grad, w])?;
    check_step_device(OP, x, w)?;
    let LinearDims { m, k, n } = grad_dims(OP, grad, x.shape(), w)?;
    let rows = acc.check(OP, w.dims(), n, m, &[grad, w])?;
    let in_step = step_len(OP, rows, k)?;
    let device = x.device();
    let (gr, wr) = (grad.read::<f32>(OP)?, w.read::<f32>(OP)?);
    let mut gx = input
        .then(|| KernelBuffer::<f32>::new(OP, device, m * k, MemoryKind::Gradient, Init::Overwritten))
        .transpose()?;
    let mut x_t = acc
        .weight
        .is_some()
        .then(|| KernelBuffer::<f32>::workspace(OP, device, in_step, Init::Overwritten))
        .transpose()?;
    let mut wacc = acc.weight.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut bacc = acc.bias.map(|t| t.write::<f32>(OP)).transpose()?;
    let mut gemm_ws = gemm_workspace(OP, device)?;
    if let Some(gx) = gx.as_mut() {
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let ws = workspace_of(&mut gemm_ws)?;
                let (g, w) = (
                    GpuMat::row_major(gr.cuda_ptr()?, m, n),
                    GpuMat::row_major(wr.cuda_ptr()?, n, k),
                );
                return gemm(gpu, ws, gx.cuda_ptr()?, k, g, w, false);
            }
            let (gs, ws) = (gr.host()?, wr.host()?);
            let (g, w) = (MatRef::row_major(gs, m, n), MatRef::row_major(ws, n, k));
            gemm_f32(gx.host_mut()?, k, g, w, false, GemmPar::Auto);
            Ok(())
        })?;
    }
    let mut partial = vec![0f32; n];
    // Time step T-1 first, each added into the accumulators (the dense kernel's order).
    for t in steps_last_to_first(device, acc.time_steps) {
        if let Some(x_t) = x_t.as_mut() {
            x.write_span(OP, t * in_step, x_t)?;
        }
        compute(device, |backend| {
            if let Compute::Cuda(gpu) = backend {
                let ws = workspace_of(&mut gemm_ws)?;
                let g_t = gr.cuda_ptr()?.add_f32(t * rows * n);
                if let (Some(aw), Some(x_t)) = (wacc.as_mut(), x_t.as_mut()) {
                    let x_m = GpuMat::row_major(x_t.cuda_ptr()?, rows, k);
                    gemm(
                        gpu,
                        ws,
                        aw.cuda_ptr()?,
                        k,
                        GpuMat::row_major(g_t, rows, n).t(),
                        x_m,
                        true,
                    )?;
                }
                if let (Some(ab), true) = (bacc.as_mut(), n > 0) {
                    // The step's f64 column sums rounded to f32, then added: as the CPU.
                    let (r, c) = (rows as u64, n as u64);
                    conv_k::column_sums(gpu, grid_for(c), g_t, r, c, ab.cuda_ptr()?, 1)?;
                }
                return Ok(());
            }
            let g_t = &gr.host()?[t * rows * n..][..rows * n];
            if let (Some(aw), Some(x_t)) = (wacc.as_mut(), x_t.as_mut()) {
                gemm_f32(
                    aw.host_mut()?,
                    k,
                    MatRef::row_major(g_t, rows, n).t(),
                    MatRef::row_major(x_t.host_mut()?, rows, k),
                    true,
                    GemmPar::Auto,
                );
            }
            if let Some(ab) = bacc.as_mut() {
                column_sums(g_t, rows, n, &mut partial);
                ab.host_mut()?
                    .iter_mut()
                    .zip(&partial)
                    .for_each(|(a, &s)| *a += s);
            }
            Ok(())
        })?;
    }
    drop((wacc, bacc, x_t, gemm_ws));
    gx.map(|b| b.into_tensor(x.shape().clone())).transpose()
}
