//! The CUDA half of BatchNorm (`batch_norm.cu`): the CPU's per-plane f64 sums into the same
//! tracked workspace, added per channel in batch order, then the elementwise passes.

use super::Layout;
use crate::Result;
use crate::backend::CudaBackend;
use crate::cuda::launchers::batch_norm as k;
use crate::cuda::{CudaPtr, grid_for};

/// Bytes of one f64 workspace value.
const F64: usize = 8;

/// Device addresses of a training-mode forward. `ws` is the f64 workspace of
/// `planes + 2 * C` values (per-plane sums, then mean and biased variance per channel).
pub(super) struct TrainPtrs {
    pub x: CudaPtr,
    pub weight: Option<CudaPtr>,
    pub bias: Option<CudaPtr>,
    /// The normalised output; `None` skips the elementwise pass (statistics only).
    pub y: Option<CudaPtr>,
    pub save_mean: CudaPtr,
    pub save_invstd: CudaPtr,
    /// Running mean and variance, updated in place.
    pub running: Option<(CudaPtr, CudaPtr)>,
    pub ws: CudaPtr,
}

/// Training-mode forward on `gpu` (see [`super::batch_norm_train`]).
pub(super) fn train(gpu: CudaBackend, l: Layout, (momentum, eps): (f32, f32), p: TrainPtrs) -> Result<()> {
    if l.c == 0 || l.planes() == 0 {
        return Ok(());
    }
    let [b, c, s, planes] = [l.b, l.c, l.s, l.planes()].map(|v| v as u64);
    let m = l.per_channel() as f64;
    let part = p.ws;
    let mean = part.offset(l.planes(), F64);
    let var = mean.offset(l.c, F64);
    let null = CudaPtr(0);
    // One group of 8 lanes per plane, then one thread per channel.
    k::bn_plane_sums(gpu, grid_for(planes * 8), p.x, planes, s, c, null, part)?;
    k::bn_channel_sums(gpu, grid_for(c), part, b, c, 1, 0, m, mean)?;
    k::bn_plane_sums(gpu, grid_for(planes * 8), p.x, planes, s, c, mean, part)?;
    k::bn_channel_sums(gpu, grid_for(c), part, b, c, 1, 0, m, var)?;
    let (rm, rv) = p.running.unwrap_or((null, null));
    // m >= 2 (checked by the caller), so the unbiasing factor is finite.
    let unbias = m / (m - 1.0);
    k::bn_finish(
        gpu,
        grid_for(c),
        mean,
        var,
        c,
        eps,
        p.save_mean,
        p.save_invstd,
        rm,
        rv,
        momentum,
        unbias,
    )?;
    let (w, bias) = (p.weight.unwrap_or(null), p.bias.unwrap_or(null));
    let n = planes * s;
    let Some(y) = p.y.filter(|_| n > 0) else {
        return Ok(());
    };
    k::bn_normalize(
        gpu,
        grid_for(n),
        p.x,
        planes,
        s,
        c,
        p.save_mean,
        p.save_invstd,
        w,
        bias,
        y,
    )
}

/// Device addresses of an evaluation-mode forward.
pub(super) struct EvalPtrs {
    pub x: CudaPtr,
    pub weight: Option<CudaPtr>,
    pub bias: Option<CudaPtr>,
    pub running_mean: CudaPtr,
    pub running_var: CudaPtr,
    pub y: CudaPtr,
}

/// Evaluation-mode forward on `gpu` (see [`super::batch_norm_eval`]).
pub(super) fn eval(gpu: CudaBackend, l: Layout, eps: f32, p: EvalPtrs) -> Result<()> {
    let n = (l.planes() * l.s) as u64;
    if n == 0 || l.c == 0 {
        return Ok(());
    }
    let [c, s, planes] = [l.c, l.s, l.planes()].map(|v| v as u64);
    let (w, b) = (p.weight.unwrap_or(CudaPtr(0)), p.bias.unwrap_or(CudaPtr(0)));
    k::bn_eval(
        gpu,
        grid_for(n),
        p.x,
        planes,
        s,
        c,
        p.running_mean,
        p.running_var,
        w,
        b,
        eps,
        p.y,
    )
}

/// Device addresses of a backward. `ws` is the f64 workspace of `2 * planes + 2 * C` values
/// (per-plane (sum g, sum g (x - mean)) pairs, then the two sums per channel); `gx` may be
/// `g` itself (in place: every sum reads `g` before the input gradient overwrites it).
pub(super) struct BackwardPtrs {
    pub g: CudaPtr,
    pub x: CudaPtr,
    pub weight: Option<CudaPtr>,
    pub save_mean: CudaPtr,
    pub save_invstd: CudaPtr,
    pub gx: Option<CudaPtr>,
    pub gw: Option<CudaPtr>,
    pub gb: Option<CudaPtr>,
    pub ws: CudaPtr,
}

/// Backward on `gpu` (see [`super::batch_norm_backward`]).
pub(super) fn backward(gpu: CudaBackend, l: Layout, p: BackwardPtrs) -> Result<()> {
    if l.c == 0 || l.planes() == 0 {
        return Ok(());
    }
    let [b, c, s, planes] = [l.b, l.c, l.s, l.planes()].map(|v| v as u64);
    let part = p.ws;
    let sum_g = part.offset(2 * l.planes(), F64);
    let dot = sum_g.offset(l.c, F64);
    let null = CudaPtr(0);
    k::bn_backward_plane_sums(
        gpu,
        grid_for(planes * 8),
        p.g,
        p.x,
        planes,
        s,
        c,
        p.save_mean,
        part,
    )?;
    // m = 0: the per-channel sums are kept as sums.
    k::bn_channel_sums(gpu, grid_for(c), part, b, c, 2, 0, 0.0, sum_g)?;
    k::bn_channel_sums(gpu, grid_for(c), part, b, c, 2, 1, 0.0, dot)?;
    if p.gw.is_some() || p.gb.is_some() {
        let (gw, gb) = (p.gw.unwrap_or(null), p.gb.unwrap_or(null));
        k::bn_param_grads(gpu, grid_for(c), sum_g, dot, c, p.save_invstd, gw, gb)?;
    }
    let m = l.per_channel() as f64;
    let n = planes * s;
    match p.gx {
        Some(gx) if m > 0.0 && n > 0 => {
            let w = p.weight.unwrap_or(null);
            let (mean, invstd) = (p.save_mean, p.save_invstd);
            k::bn_backward_input(
                gpu,
                grid_for(n),
                p.g,
                p.x,
                planes,
                s,
                c,
                mean,
                invstd,
                w,
                sum_g,
                dot,
                m,
                gx,
            )
        }
        _ => Ok(()),
    }
}
