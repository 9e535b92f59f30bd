//! The CUDA half of the multi-step neurons: one kernel over all T per call (`neuron.cu`), the
//! membrane state or its gradient in registers, with the constants [`Dynamics`] resolves on the
//! host exactly as for the CPU kernel.

use super::Surrogate;
use super::config::{Charge, DecayGrad, Dynamics};
use crate::Result;
use crate::backend::CudaBackend;
use crate::cuda::launchers::neuron as k;
use crate::cuda::{BLOCK_THREADS, CudaPtr, LaunchConfig, NeuronBackwardConsts, blocks, grid_for};

/// Neurons per PLIF partial sum: one block of [`BLOCK_THREADS`] threads handles this many
/// (`NEURON_CHUNK` of `neuron.cu`, 256 threads x 4 neurons).
const PLIF_CHUNK: usize = super::PLIF_PARTIAL_NEURONS;
const _: () = assert!(PLIF_CHUNK == 4 * BLOCK_THREADS as usize);

/// Every forward kernel takes (x, steps, n, v_init, k, vr, vth, spikes, h_seq, v_final).
type ForwardKernel = fn(
    CudaBackend,
    LaunchConfig,
    CudaPtr,
    u64,
    u64,
    CudaPtr,
    f32,
    f32,
    f32,
    CudaPtr,
    CudaPtr,
    CudaPtr,
) -> Result<()>;

/// Device addresses of one forward call; `x` may equal `h_seq` (the potentials overwrite the
/// input in place: each is written after its input is read).
pub(super) struct ForwardPtrs {
    pub x: CudaPtr,
    pub v_init: Option<CudaPtr>,
    /// `None` writes no spikes (a forward for backward only).
    pub spikes: Option<CudaPtr>,
    pub h_seq: Option<CudaPtr>,
    pub v_final: CudaPtr,
}

/// Runs the forward of `d` over `steps` time steps of `n` neurons on `gpu`.
pub(super) fn forward(gpu: CudaBackend, d: &Dynamics, steps: usize, n: usize, p: ForwardPtrs) -> Result<()> {
    if steps == 0 || n == 0 {
        return Ok(());
    }
    let (kernel, kk, vr): (ForwardKernel, f32, f32) = match (d.charge, d.hard) {
        (Charge::If, true) => (k::neuron_forward_if_hard, 0.0, d.v_reset),
        (Charge::If, false) => (k::neuron_forward_if_soft, 0.0, d.v_reset),
        (Charge::Decay { k: kk, vr }, true) => (k::neuron_forward_decay_hard, kk, vr),
        (Charge::Decay { k: kk, vr }, false) => (k::neuron_forward_decay_soft, kk, vr),
        (Charge::NoDecay { k: kk, vr }, true) => (k::neuron_forward_nodecay_hard, kk, vr),
        (Charge::NoDecay { k: kk, vr }, false) => (k::neuron_forward_nodecay_soft, kk, vr),
    };
    let null = CudaPtr(0);
    kernel(
        gpu,
        grid_for(n as u64),
        p.x,
        steps as u64,
        n as u64,
        p.v_init.unwrap_or(null),
        kk,
        vr,
        d.v_threshold,
        p.spikes.unwrap_or(null),
        p.h_seq.unwrap_or(null),
        p.v_final,
    )
}

/// Device addresses of one backward call; `grad_x` may equal `grad_spikes` (in place).
pub(super) struct BackwardPtrs {
    pub grad_spikes: CudaPtr,
    pub grad_v_final: Option<CudaPtr>,
    pub h_seq: CudaPtr,
    pub v_init: Option<CudaPtr>,
    pub grad_x: CudaPtr,
    pub grad_v_init: Option<CudaPtr>,
    /// PLIF: `T` f32 partials per block of [`PLIF_CHUNK`] neurons (the tracked workspace).
    pub partials: Option<CudaPtr>,
    /// PLIF: the `[1]` the parameter's gradient is added into.
    pub grad_w: Option<CudaPtr>,
}

/// Every plain backward kernel takes (grad_spikes, grad_v_final, h_seq, steps, n, consts,
/// grad_x, grad_v_init).
type PlainKernel = fn(
    CudaBackend,
    LaunchConfig,
    CudaPtr,
    CudaPtr,
    CudaPtr,
    u64,
    u64,
    NeuronBackwardConsts,
    CudaPtr,
    CudaPtr,
) -> Result<()>;

/// Every PLIF backward kernel takes (grad_spikes, grad_v_final, h_seq, v_init, steps, n, consts,
/// grad_x, grad_v_init, partials).
type PlifKernel = fn(
    CudaBackend,
    LaunchConfig,
    CudaPtr,
    CudaPtr,
    CudaPtr,
    CudaPtr,
    u64,
    u64,
    NeuronBackwardConsts,
    CudaPtr,
    CudaPtr,
    CudaPtr,
) -> Result<()>;

/// Runs the backward through time of `d` with surrogate `sg` on `gpu`; for PLIF, then adds each
/// time step's parameter gradient into `grad_w`, step `T-1` first (`plif_w_grad`).
pub(super) fn backward(
    gpu: CudaBackend,
    d: &Dynamics,
    sg: Surrogate,
    (steps, n): (usize, usize),
    p: BackwardPtrs,
) -> Result<()> {
    if steps == 0 || n == 0 {
        return Ok(());
    }
    let k_value = match d.decay_grad {
        DecayGrad::DecayInput { k } => k,
        _ => 0.0,
    };
    let consts = NeuronBackwardConsts {
        dh_dv: d.dh_dv,
        dh_dx: d.dh_dx,
        vth: d.v_threshold,
        vr: d.v_reset,
        reset_grad: d.reset_grad,
        k: k_value,
        alpha: sg.alpha(),
    };
    let null = CudaPtr(0);
    let (gvf, gvi, vi) = (
        p.grad_v_final.unwrap_or(null),
        p.grad_v_init.unwrap_or(null),
        p.v_init.unwrap_or(null),
    );
    let (t64, n64) = (steps as u64, n as u64);
    let atan = matches!(sg, Surrogate::ATan { .. });
    let plif: Option<PlifKernel> = match (d.decay_grad, d.hard, atan) {
        (DecayGrad::None, ..) => None,
        (DecayGrad::DecayInput { .. }, true, false) => Some(k::plif_backward_hard_decay_sigmoid),
        (DecayGrad::DecayInput { .. }, false, false) => Some(k::plif_backward_soft_decay_sigmoid),
        (DecayGrad::NoDecayInput { .. }, true, false) => Some(k::plif_backward_hard_nodecay_sigmoid),
        (DecayGrad::NoDecayInput { .. }, false, false) => Some(k::plif_backward_soft_nodecay_sigmoid),
        (DecayGrad::DecayInput { .. }, true, true) => Some(k::plif_backward_hard_decay_atan),
        (DecayGrad::DecayInput { .. }, false, true) => Some(k::plif_backward_soft_decay_atan),
        (DecayGrad::NoDecayInput { .. }, true, true) => Some(k::plif_backward_hard_nodecay_atan),
        (DecayGrad::NoDecayInput { .. }, false, true) => Some(k::plif_backward_soft_nodecay_atan),
    };
    let Some(plif) = plif else {
        let kernel: PlainKernel = match (d.hard, atan) {
            (true, false) => k::neuron_backward_hard_sigmoid,
            (false, false) => k::neuron_backward_soft_sigmoid,
            (true, true) => k::neuron_backward_hard_atan,
            (false, true) => k::neuron_backward_soft_atan,
        };
        return kernel(
            gpu,
            grid_for(n64),
            p.grad_spikes,
            gvf,
            p.h_seq,
            t64,
            n64,
            consts,
            p.grad_x,
            gvi,
        );
    };
    let partials = p.partials.ok_or_else(|| {
        crate::CoreError::invalid(
            "neuron_backward",
            "a PLIF backward needs its partial-sum workspace",
        )
    })?;
    // Exactly one block of 256 threads per chunk of PLIF_CHUNK neurons: the block index is the
    // partial's row.
    let chunks = n.div_ceil(PLIF_CHUNK) as u64;
    plif(
        gpu,
        blocks(chunks),
        p.grad_spikes,
        gvf,
        p.h_seq,
        vi,
        t64,
        n64,
        consts,
        p.grad_x,
        gvi,
        partials,
    )?;
    if let Some(gw) = p.grad_w {
        k::plif_w_grad(gpu, blocks(1), partials, chunks, t64, d.dk_dw, gw)?;
    }
    Ok(())
}
