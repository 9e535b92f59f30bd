//! The CUDA half of BatchNorm (`batch_norm.cu`): the CPU's per-plane f64 sums into the same
//! tracked workspace, folded per channel one sample after the other in the CPU's direction,
//! then the elementwise passes. The whole-batch kernels and the chunked entry points launch the
//! same kernels, as their CPU halves call the same functions of `sums.rs`.

use super::Layout;
use crate::Result;
use crate::backend::CudaBackend;
use crate::cuda::launchers::batch_norm as k;
use crate::cuda::{CudaPtr, grid_for};

/// Bytes of one f64 workspace value.
const F64: usize = 8;
const NULL: CudaPtr = CudaPtr(0);
/// `descending` arguments of `bn_fold_pairs`.
const ASCENDING: u64 = 0;
const DESCENDING: u64 = 1;

/// Device addresses of a training-mode forward. `ws` is the f64 workspace of
/// `2 * planes + 3 * C` values (per-plane pairs, then the shift and the two sums per channel).
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

/// The shift, the per-plane pairs and their fold: `sums` is `[shift | s1 | s2]` (`3 * C` f64),
/// `part` holds `2 * planes` f64. `fresh`: the shift is set from `x` and the fold starts from
/// zero (a whole batch, or the first part of one).
fn shifted_sums(
    gpu: CudaBackend,
    l: Layout,
    fresh: bool,
    x: CudaPtr,
    sums: CudaPtr,
    part: CudaPtr,
) -> Result<()> {
    let [b, c, s, planes] = [l.b, l.c, l.s, l.planes()].map(|v| v as u64);
    let shift = sums;
    let s1 = shift.offset(l.c, F64);
    let s2 = s1.offset(l.c, F64);
    if fresh {
        k::bn_set_shift(gpu, grid_for(c), x, s, c, shift)?;
    }
    if planes == 0 {
        return Ok(());
    }
    // One group of 8 lanes per plane, then one thread per channel.
    k::bn_stat_plane_sums(gpu, grid_for(planes * 8), x, planes, s, c, shift, part)?;
    k::bn_fold_pairs(gpu, grid_for(c), part, b, c, ASCENDING, u64::from(fresh), s1, s2)
}

/// Mean, invstd and the running update from `sums` (`[shift | s1 | s2]`) over `m` values.
fn finish(
    gpu: CudaBackend,
    c: usize,
    (m, momentum, eps): (f64, f32, f32),
    sums: CudaPtr,
    (mean, invstd): (CudaPtr, CudaPtr),
    running: Option<(CudaPtr, CudaPtr)>,
) -> Result<()> {
    let s1 = sums.offset(c, F64);
    let s2 = s1.offset(c, F64);
    let (rm, rv) = running.unwrap_or((NULL, NULL));
    let c = c as u64;
    k::bn_finish(
        gpu,
        grid_for(c),
        sums,
        s1,
        s2,
        c,
        m,
        eps,
        mean,
        invstd,
        rm,
        rv,
        momentum,
    )
}

/// Training-mode forward on `gpu` (see [`super::batch_norm_train`]).
pub(super) fn train(gpu: CudaBackend, l: Layout, (momentum, eps): (f32, f32), p: TrainPtrs) -> Result<()> {
    if l.c == 0 || l.planes() == 0 {
        return Ok(());
    }
    let sums = p.ws.offset(2 * l.planes(), F64);
    shifted_sums(gpu, l, true, p.x, sums, p.ws)?;
    // m >= 2 (checked by the caller), so the unbiasing factor is finite.
    let m = l.per_channel() as f64;
    finish(
        gpu,
        l.c,
        (m, momentum, eps),
        sums,
        (p.save_mean, p.save_invstd),
        p.running,
    )?;
    // Statistics only when nobody reads the output.
    let Some(y) = p.y else {
        return Ok(());
    };
    normalize(
        gpu,
        l,
        NormalizePtrs {
            x: p.x,
            mean: p.save_mean,
            invstd: p.save_invstd,
            weight: p.weight,
            bias: p.bias,
            y,
        },
    )
}

/// Adds the part `x` to the statistics sums (see [`super::batch_norm_stat_sums`]).
pub(super) fn stat_sums(
    gpu: CudaBackend,
    l: Layout,
    fresh: bool,
    x: CudaPtr,
    sums: CudaPtr,
    part: CudaPtr,
) -> Result<()> {
    if l.c == 0 {
        return Ok(());
    }
    shifted_sums(gpu, l, fresh, x, sums, part)
}

/// Statistics from complete sums (see [`super::batch_norm_stats_finish`]).
pub(super) fn finish_stats(
    gpu: CudaBackend,
    c: usize,
    consts: (f64, f32, f32),
    sums: CudaPtr,
    out: (CudaPtr, CudaPtr),
    running: Option<(CudaPtr, CudaPtr)>,
) -> Result<()> {
    if c == 0 {
        return Ok(());
    }
    finish(gpu, c, consts, sums, out, running)
}

/// Device addresses of a normalisation with given statistics.
pub(super) struct NormalizePtrs {
    pub x: CudaPtr,
    pub mean: CudaPtr,
    pub invstd: CudaPtr,
    pub weight: Option<CudaPtr>,
    pub bias: Option<CudaPtr>,
    pub y: CudaPtr,
}

/// `y = (x - mean) * (invstd * weight) + bias` (see [`super::batch_norm_normalize`]).
pub(super) fn normalize(gpu: CudaBackend, l: Layout, p: NormalizePtrs) -> Result<()> {
    let n = (l.planes() * l.s) as u64;
    if n == 0 || l.c == 0 {
        return Ok(());
    }
    let [c, s, planes] = [l.c, l.s, l.planes()].map(|v| v as u64);
    let (w, bias) = (p.weight.unwrap_or(NULL), p.bias.unwrap_or(NULL));
    k::bn_normalize(
        gpu,
        grid_for(n),
        p.x,
        planes,
        s,
        c,
        p.mean,
        p.invstd,
        w,
        bias,
        p.y,
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
    let (w, b) = (p.weight.unwrap_or(NULL), p.bias.unwrap_or(NULL));
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

/// The per-plane gradient pairs of `(g, x)` and their fold into `sums` (`[sum_g | dot]`,
/// `2 * C` f64) in descending sample order; `fresh`: the fold starts from zero.
fn grad_pairs(
    gpu: CudaBackend,
    l: Layout,
    fresh: bool,
    (g, x, mean): (CudaPtr, CudaPtr, CudaPtr),
    sums: CudaPtr,
    part: CudaPtr,
) -> Result<()> {
    let [b, c, s, planes] = [l.b, l.c, l.s, l.planes()].map(|v| v as u64);
    if planes == 0 {
        return Ok(());
    }
    let dot = sums.offset(l.c, F64);
    k::bn_backward_plane_sums(gpu, grid_for(planes * 8), g, x, planes, s, c, mean, part)?;
    k::bn_fold_pairs(
        gpu,
        grid_for(c),
        part,
        b,
        c,
        DESCENDING,
        u64::from(fresh),
        sums,
        dot,
    )
}

/// Adds the part `(g, x)` to the gradient sums (see [`super::batch_norm_grad_sums`]).
pub(super) fn grad_sums(
    gpu: CudaBackend,
    l: Layout,
    ptrs: (CudaPtr, CudaPtr, CudaPtr),
    sums: CudaPtr,
    part: CudaPtr,
) -> Result<()> {
    if l.c == 0 {
        return Ok(());
    }
    grad_pairs(gpu, l, false, ptrs, sums, part)
}

/// Weight and bias gradients from `sums` (`[sum_g | dot]`; see
/// [`super::batch_norm_param_grads`]).
pub(super) fn param_grads(
    gpu: CudaBackend,
    c: usize,
    sums: CudaPtr,
    invstd: CudaPtr,
    (gw, gb): (Option<CudaPtr>, Option<CudaPtr>),
) -> Result<()> {
    if c == 0 || (gw.is_none() && gb.is_none()) {
        return Ok(());
    }
    let dot = sums.offset(c, F64);
    let c = c as u64;
    k::bn_param_grads(
        gpu,
        grid_for(c),
        sums,
        dot,
        c,
        invstd,
        gw.unwrap_or(NULL),
        gb.unwrap_or(NULL),
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
    let sums = p.ws.offset(2 * l.planes(), F64);
    grad_pairs(gpu, l, true, (p.g, p.x, p.save_mean), sums, p.ws)?;
    param_grads(gpu, l.c, sums, p.save_invstd, (p.gw, p.gb))?;
    match p.gx {
        Some(gx) => {
            let m = l.per_channel() as f64;
            let ptrs = InputPtrs {
                g: p.g,
                x: p.x,
                weight: p.weight,
                mean: p.save_mean,
                invstd: p.save_invstd,
                sums,
                gx,
            };
            backward_input(gpu, l, m, ptrs)
        }
        None => Ok(()),
    }
}

/// Device addresses of an input gradient from complete gradient sums (`[sum_g | dot]`); `gx`
/// may be `g` itself.
pub(super) struct InputPtrs {
    pub g: CudaPtr,
    pub x: CudaPtr,
    pub weight: Option<CudaPtr>,
    pub mean: CudaPtr,
    pub invstd: CudaPtr,
    pub sums: CudaPtr,
    pub gx: CudaPtr,
}

/// The input gradient over `m` values per channel (see
/// [`super::batch_norm_backward_input`]).
pub(super) fn backward_input(gpu: CudaBackend, l: Layout, m: f64, p: InputPtrs) -> Result<()> {
    let n = (l.planes() * l.s) as u64;
    if m <= 0.0 || n == 0 || l.c == 0 {
        return Ok(());
    }
    let [c, s, planes] = [l.c, l.s, l.planes()].map(|v| v as u64);
    let dot = p.sums.offset(l.c, F64);
    k::bn_backward_input(
        gpu,
        grid_for(n),
        p.g,
        p.x,
        planes,
        s,
        c,
        p.mean,
        p.invstd,
        p.weight.unwrap_or(NULL),
        p.sums,
        dot,
        m,
        p.gx,
    )
}
