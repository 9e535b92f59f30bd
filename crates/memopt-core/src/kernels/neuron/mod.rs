//! Multi-step spiking neurons (IF, LIF, parametric LIF) with surrogate-gradient backward
//! through time, matching SpikingJelly 2.0's `step_mode='m'` numerics.
//!
//! Per time step `t` (`x`, `spikes`, `h_seq` are `[T, ...]`, states `[...]`):
//! charge `H[t] = f(V[t-1], X[t])` (see [`NeuronKind`]), fire `S[t] = (H[t] >= v_threshold)`,
//! reset `V[t] = H[t] (1 - S[t]) + v_reset S[t]` (hard) or `H[t] - v_threshold S[t]` (soft).
//! Backward replaces `dS/dH` by the [`Surrogate`] derivative at `H - v_threshold`.
//!
//! The charge uses the expressions of SpikingJelly's CUDA multi-step kernels (multiplying by
//! `1/tau`); f32 results agree with SpikingJelly's float64 reference to about 1e-6 relative,
//! spikes exactly (`tests/neuron_golden.rs`).
//!
//! The kernels make one pass over `T` per neuron with the state on the stack, in parallel over
//! chunks of neurons; each chunk walks the time rows so that every access is contiguous. On
//! x86-64 an AVX2+FMA build of the loops is chosen at run time; its results are bitwise identical
//! to the baseline build, and every result is independent of the thread count.

mod backward;
mod chunks;
mod config;
mod cuda;
mod forward;
mod surrogate;
#[cfg(test)]
mod tests;

pub use config::{NeuronConfig, NeuronKind};
pub use surrogate::Surrogate;

use super::Operand;
use crate::backend::{Compute, Init, compute};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Shape, Tensor};
use backward::{BackwardIo, backward_cpu};
use config::Dynamics;
use forward::{ForwardIo, forward_cpu};

/// Neurons per partial sum of the PLIF parameter's gradient, on every target: each time step's
/// `dL/dk` contributions of a block of this many consecutive neurons are summed in f64 in
/// neuron order and rounded to one f32 partial, and the partials of a step are summed in block
/// order. The same blocks on the CPU (eight per rayon chunk) and on CUDA (one thread block of
/// 256 threads x 4 neurons each) make the parameter's gradient bit-identical across devices.
pub const PLIF_PARTIAL_NEURONS: usize = 1024;

/// Outputs of [`neuron_forward`].
#[derive(Debug, Clone)]
pub struct NeuronOutput {
    /// Spikes `[T, ...]` in {0, 1} (spike flag set), kind Activation.
    pub spikes: Tensor,
    /// Membrane potential after the last step's reset, `[...]`, kind Activation.
    pub v_final: Tensor,
    /// Membrane potential before firing and reset at every step, `[T, ...]`, kind Activation;
    /// `Some` only when `save_for_backward` was set. [`neuron_backward`] needs it.
    pub h_seq: Option<Tensor>,
}

/// Gradients from [`neuron_backward`], all of kind Gradient.
#[derive(Debug, Clone)]
pub struct NeuronGrads {
    /// Gradient of the input, `[T, ...]`.
    pub x: Tensor,
    /// Gradient of the initial membrane state, `[...]`; `Some` when asked for (also when the
    /// forward started from the default state).
    pub v_init: Option<Tensor>,
    /// Gradient of the PLIF parameter `w`, `[1]` (summed over neurons and time steps); `Some`
    /// exactly for PLIF neurons.
    pub w: Option<Tensor>,
}

/// Runs a multi-step neuron over `x` `[T, ...]` (`T >= 1`) from the state `v_init` `[...]`
/// (`None`: every neuron starts at `v_reset`, or 0 under soft reset). `w` is the PLIF parameter,
/// shape `[1]` with `1/tau = sigmoid(w)`; it is required for PLIF and refused otherwise.
///
/// `x` is lent (`&x`) or handed over (`x`, see [`Operand`]): handed over and reusable, the
/// membrane potentials (with `save_for_backward`) or else the spikes overwrite the input in
/// place and no `[T, ...]` buffer is allocated for them; results are bit-identical either way.
///
/// Allocates, in this order: spikes `[T, ...]` (unless written over a reused `x`), `h_seq`
/// `[T, ...]` (only when `save_for_backward` and `x` is not reused), `v_final` `[...]`; nothing
/// else.
pub fn neuron_forward<'a>(
    cfg: &NeuronConfig,
    x: impl Into<Operand<'a>>,
    v_init: Option<&Tensor>,
    w: Option<&Tensor>,
    save_for_backward: bool,
) -> Result<NeuronOutput> {
    forward(cfg, x.into(), v_init, w, save_for_backward, true)
}

/// [`neuron_forward`] with `save_for_backward` for a backward only: the same `h_seq` and
/// `v_final` (bit for bit), without the spikes, which are returned as an unmaterialised stand-in
/// ([`Tensor::unmaterialised`], spike flag set): no spike buffer is allocated or written. Used
/// when nobody reads the spikes (a recomputed segment's output, whose gradient is all its
/// backward needs; [`neuron_backward`] reads `h_seq`, not the spikes).
///
/// Allocates, in this order: `h_seq` `[T, ...]` (unless `x` is handed over and reused),
/// `v_final` `[...]`; nothing else.
pub fn neuron_forward_for_backward<'a>(
    cfg: &NeuronConfig,
    x: impl Into<Operand<'a>>,
    v_init: Option<&Tensor>,
    w: Option<&Tensor>,
) -> Result<NeuronOutput> {
    forward(cfg, x.into(), v_init, w, true, false)
}

fn forward(
    cfg: &NeuronConfig,
    x: Operand<'_>,
    v_init: Option<&Tensor>,
    w: Option<&Tensor>,
    save_for_backward: bool,
    with_spikes: bool,
) -> Result<NeuronOutput> {
    const OP: &str = "neuron_forward";
    let xt = x.tensor();
    cfg.validate()?;
    let (steps, n) = sequence_dims(OP, "x", xt)?;
    if let Some(v) = v_init {
        check_state(OP, "v_init", v, xt)?;
    }
    check_w(OP, cfg, w, xt)?;
    let reusable = x.reusable() && xt.dtype() == crate::DType::F32;
    // A handed-over input is overwritten with h_seq when the potentials are kept, else with
    // the spikes (each element is read just before its step's result is written over it).
    let h_in_place = save_for_backward && reusable;
    let spikes_in_place = !save_for_backward && with_spikes && reusable;
    let in_place = h_in_place || spikes_in_place;
    // The input: read next to new buffers, or overwritten in place.
    let (xr, mut xw) = if in_place {
        (None, Some(xt.write::<f32>(OP)?))
    } else {
        (Some(xt.read::<f32>(OP)?), None)
    };
    let vr = v_init.map(|v| v.read::<f32>(OP)).transpose()?;
    let dynamics = Dynamics::new(cfg, read_w(OP, w)?);

    let device = xt.device();
    let kind = MemoryKind::Activation;
    let mut spikes = (with_spikes && !spikes_in_place)
        .then(|| KernelBuffer::<f32>::new(OP, device, steps * n, kind, Init::Overwritten))
        .transpose()?;
    let mut h_seq = (save_for_backward && !h_in_place)
        .then(|| KernelBuffer::<f32>::new(OP, device, steps * n, kind, Init::Overwritten))
        .transpose()?;
    let mut v_final = KernelBuffer::<f32>::new(OP, device, n, kind, Init::Overwritten)?;
    compute(device, |backend| {
        if let Compute::Cuda(gpu) = backend {
            // In place, the input's storage is both x and h_seq, or both x and the spikes.
            let (x, h, s) = match (&mut h_seq, &mut xw, &xr) {
                (_, Some(w), _) if spikes_in_place => {
                    let p = w.cuda_ptr()?;
                    (p, None, Some(p))
                }
                (_, Some(w), _) => {
                    let p = w.cuda_ptr()?;
                    (p, Some(p), None)
                }
                (Some(b), None, Some(r)) => (r.cuda_ptr()?, Some(b.cuda_ptr()?), None),
                (None, None, Some(r)) => (r.cuda_ptr()?, None, None),
                // xr is read exactly when x is not overwritten in place.
                (_, None, None) => return Err(CoreError::invalid(OP, "no access to the input")),
            };
            let spikes = match s {
                Some(p) => Some(p),
                None => spikes.as_mut().map(|b| b.cuda_ptr()).transpose()?,
            };
            let ptrs = cuda::ForwardPtrs {
                x,
                v_init: vr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                spikes,
                h_seq: h,
                v_final: v_final.cuda_ptr()?,
            };
            return cuda::forward(gpu, &dynamics, steps, n, ptrs);
        }
        // In place, the input's slot is the spikes' or h_seq's, and `x` is absent.
        let (h, s) = match (&mut h_seq, &mut xw) {
            (_, Some(w)) if spikes_in_place => (None, Some(w.host_mut()?)),
            (Some(b), _) => (Some(b.host_mut()?), None),
            (None, Some(w)) => (Some(w.host_mut()?), None),
            (None, None) => (None, None),
        };
        let s = match s {
            Some(s) => Some(s),
            None => spikes.as_mut().map(|b| b.host_mut()).transpose()?,
        };
        let io = ForwardIo {
            steps,
            n,
            x: xr.as_ref().map(|r| r.host()).transpose()?,
            v_init: vr.as_ref().map(|r| r.host()).transpose()?,
            spikes: s,
            h_seq: h,
            v_final: v_final.host_mut()?,
        };
        forward_cpu(&dynamics, io);
        Ok(())
    })?;
    drop((xr, xw));
    let (shape, state) = (xt.shape().clone(), state_shape(xt));
    // The input's storage, when it now holds the potentials or the spikes.
    let reused = in_place.then(|| x.into_given()).flatten();
    let (h_seq, reused) = match (h_seq, h_in_place) {
        (Some(b), _) => (Some(b.into_tensor(shape.clone())?), reused),
        (None, true) => (reused.map(|t| t.with_spike_flag(false)), None),
        (None, false) => (None, reused),
    };
    let spikes = match (spikes, reused) {
        (Some(b), _) => b.into_tensor(shape)?,
        (None, Some(t)) => t,
        (None, None) => Tensor::unmaterialised(shape, crate::DType::F32, device)?,
    };
    Ok(NeuronOutput {
        spikes: spikes.with_spike_flag(true),
        v_final: v_final.into_tensor(state)?,
        h_seq,
    })
}

/// Arguments of [`neuron_backward`], the backward through time of [`neuron_forward`].
#[derive(Debug)]
pub struct NeuronBackward<'a> {
    /// The neuron the forward ran.
    pub cfg: &'a NeuronConfig,
    /// Gradient of the spikes, `[T, ...]`; handed over (see [`Operand`]), its storage may
    /// receive the input gradient in place (each element is read just before its gradient is
    /// written) and no `[T, ...]` buffer is allocated.
    pub grad_spikes: Operand<'a>,
    /// Gradient flowing into the final membrane state, `[...]` (from a later time chunk;
    /// `None` = zero).
    pub grad_v_final: Option<&'a Tensor>,
    /// The forward's saved membrane potentials `[T, ...]`.
    pub h_seq: &'a Tensor,
    /// The forward's initial state, `[...]`.
    pub v_init: Option<&'a Tensor>,
    /// The forward's PLIF parameter `[1]`.
    pub w: Option<&'a Tensor>,
    /// Whether to compute the initial state's gradient.
    pub want_v_init_grad: bool,
    /// PLIF only: an accumulator `[1]` the parameter's gradient is added into instead of being
    /// returned (then `NeuronGrads::w` is `None`). Each time step's contribution is added
    /// separately, step `T-1` first, so that running the time steps in chunks (last chunk
    /// first, states and their gradients carried between chunks) gives a bit-identical sum.
    pub w_acc: Option<&'a Tensor>,
}

/// Backward through time of [`neuron_forward`] (arguments in [`NeuronBackward`]).
///
/// Allocates, in this order: grad_x `[T, ...]` (unless written over `grad_spikes`),
/// grad_v_init `[...]` (when asked), grad_w `[1]` (PLIF without `w_acc`), and for PLIF a
/// workspace of `T` f32 per block of [`PLIF_PARTIAL_NEURONS`] neurons, freed before returning.
pub fn neuron_backward(args: NeuronBackward<'_>) -> Result<NeuronGrads> {
    const OP: &str = "neuron_backward";
    let NeuronBackward {
        cfg,
        grad_spikes: grad_in,
        grad_v_final,
        h_seq,
        v_init,
        w,
        want_v_init_grad,
        w_acc,
    } = args;
    let grad_spikes = grad_in.tensor();
    cfg.validate()?;
    let (steps, n) = sequence_dims(OP, "grad_spikes", grad_spikes)?;
    grad_spikes.expect_same_device(OP, h_seq)?;
    if h_seq.dims() != grad_spikes.dims() {
        return Err(CoreError::shape(
            OP,
            format!("h_seq of the shape of grad_spikes, {}", grad_spikes.shape()),
            h_seq.shape(),
        ));
    }
    if let Some(g) = grad_v_final {
        check_state(OP, "grad_v_final", g, grad_spikes)?;
    }
    if let Some(v) = v_init {
        check_state(OP, "v_init", v, grad_spikes)?;
    }
    check_w(OP, cfg, w, grad_spikes)?;
    if let Some(acc) = w_acc {
        if !matches!(cfg.kind, NeuronKind::Plif { .. }) {
            return Err(CoreError::invalid(
                OP,
                "w_acc accumulates the PLIF parameter's gradient; pass None for other neurons",
            ));
        }
        acc.expect_dtype(OP, crate::DType::F32)?;
        grad_spikes.expect_same_device(OP, acc)?;
        if acc.dims() != [1] || w.is_some_and(|w| w.same_storage(acc)) {
            return Err(CoreError::shape(
                OP,
                "a w_acc of shape [1], separate from w",
                acc.shape(),
            ));
        }
    }
    grad_spikes.expect_dtype(OP, crate::DType::F32)?;
    let in_place = grad_in.reusable();
    let hr = h_seq.read::<f32>(OP)?;
    let gvr = grad_v_final.map(|g| g.read::<f32>(OP)).transpose()?;
    let vr = v_init.map(|v| v.read::<f32>(OP)).transpose()?;
    let dynamics = Dynamics::new(cfg, read_w(OP, w)?);
    let is_plif = matches!(cfg.kind, NeuronKind::Plif { .. });

    let device = grad_spikes.device();
    let kind = MemoryKind::Gradient;
    let mut grad_x = (!in_place)
        .then(|| KernelBuffer::<f32>::new(OP, device, steps * n, kind, Init::Overwritten))
        .transpose()?;
    let mut grad_v_init = want_v_init_grad
        .then(|| KernelBuffer::<f32>::new(OP, device, n, kind, Init::Overwritten))
        .transpose()?;
    let grad_w = (is_plif && w_acc.is_none())
        .then(|| Tensor::zeros([1], crate::DType::F32, device, kind))
        .transpose()?;
    let mut partials = is_plif
        .then(|| {
            KernelBuffer::<f32>::workspace(
                OP,
                device,
                n.div_ceil(PLIF_PARTIAL_NEURONS) * steps,
                Init::Overwritten,
            )
        })
        .transpose()?;
    let mut w_target = w_acc
        .or(grad_w.as_ref())
        .map(|t| t.write::<f32>(OP))
        .transpose()?;
    // The spikes' gradient: read next to a new grad_x, or overwritten with grad_x in place.
    let (gsr, mut gsw) = if in_place {
        (None, Some(grad_spikes.write::<f32>(OP)?))
    } else {
        (Some(grad_spikes.read::<f32>(OP)?), None)
    };
    compute(device, |backend| {
        if let Compute::Cuda(gpu) = backend {
            let grad_spikes = match (&gsr, &mut gsw) {
                (Some(r), _) => r.cuda_ptr()?,
                (None, Some(w)) => w.cuda_ptr()?,
                (None, None) => return Err(CoreError::invalid(OP, "no access to grad_spikes")),
            };
            // In place, the input gradient overwrites grad_spikes element by element.
            let grad_x = match &mut grad_x {
                Some(b) => b.cuda_ptr()?,
                None => grad_spikes,
            };
            let ptrs = cuda::BackwardPtrs {
                grad_spikes,
                grad_v_final: gvr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                h_seq: hr.cuda_ptr()?,
                v_init: vr.as_ref().map(|r| r.cuda_ptr()).transpose()?,
                grad_x,
                grad_v_init: grad_v_init.as_mut().map(|g| g.cuda_ptr()).transpose()?,
                partials: partials.as_mut().map(|p| p.cuda_ptr()).transpose()?,
                grad_w: w_target.as_mut().map(|g| g.cuda_ptr()).transpose()?,
            };
            return cuda::backward(gpu, &dynamics, cfg.surrogate, (steps, n), ptrs);
        }
        let gs = gsr.as_ref().map(|r| r.host()).transpose()?;
        let gx = match (&mut grad_x, &mut gsw) {
            (Some(b), _) => b.host_mut()?,
            (None, Some(w)) => w.host_mut()?,
            // grad_x is allocated exactly when the gradient is not written in place.
            (None, None) => return Err(CoreError::invalid(OP, "no buffer for the input gradient")),
        };
        let hs = hr.host()?;
        let io = BackwardIo {
            steps,
            n,
            grad_spikes: gs,
            grad_v_final: gvr.as_ref().map(|r| r.host()).transpose()?,
            h_seq: hs,
            v_init: vr.as_ref().map(|r| r.host()).transpose()?,
            grad_x: gx,
            grad_v_init: grad_v_init.as_mut().map(|g| g.host_mut()).transpose()?,
            partials: partials.as_mut().map(|p| p.host_mut()).transpose()?,
        };
        backward_cpu(&dynamics, cfg.surrogate, io);
        if let (Some(p), Some(gw)) = (
            partials.as_mut().map(|p| p.host_mut()).transpose()?,
            w_target.as_mut().map(|g| g.host_mut()).transpose()?,
        ) {
            for t in (0..steps).rev() {
                let s: f64 = p.iter().skip(t).step_by(steps).map(|&v| v as f64).sum();
                gw[0] += (s * dynamics.dk_dw as f64) as f32;
            }
        }
        Ok(())
    })?;
    drop((partials, w_target, gsr, gsw));
    let (shape, state) = (grad_spikes.shape().clone(), state_shape(grad_spikes));
    let v_init = grad_v_init.map(|g| g.into_tensor(state)).transpose()?;
    let x = match (grad_x, grad_in.into_given()) {
        (Some(b), _) => b.into_tensor(shape)?,
        (None, Some(g)) => g.with_spike_flag(false),
        // grad_x is allocated unless the gradient was handed over and written in place.
        (None, None) => return Err(CoreError::invalid(OP, "no buffer for the input gradient")),
    };
    Ok(NeuronGrads { x, v_init, w: grad_w })
}

/// `(T, neurons per step)` of a `[T, ...]` sequence, refusing scalars and `T = 0`.
fn sequence_dims(op: &'static str, name: &str, seq: &Tensor) -> Result<(usize, usize)> {
    match seq.dims().first() {
        None => Err(CoreError::invalid(
            op,
            format!("{name} must be a sequence [T, ...] with T >= 1, got a scalar"),
        )),
        Some(0) => Err(CoreError::invalid(
            op,
            format!(
                "{name} of shape {} has T = 0 time steps; need T >= 1",
                seq.shape()
            ),
        )),
        Some(&t) => Ok((t, seq.shape().inner_count())),
    }
}

/// The shape of one time step of `seq` (`[T, ...]` -> `[...]`).
fn state_shape(seq: &Tensor) -> Shape {
    Shape::new(&seq.dims()[1..])
}

/// Checks that a state tensor has the shape of one time step of `seq`, on its device.
fn check_state(op: &'static str, name: &str, state: &Tensor, seq: &Tensor) -> Result<()> {
    seq.expect_same_device(op, state)?;
    if state.dims() != &seq.dims()[1..] {
        return Err(CoreError::shape(
            op,
            format!(
                "{name} of shape {} (one time step of {})",
                state_shape(seq),
                seq.shape()
            ),
            state.shape(),
        ));
    }
    Ok(())
}

/// Checks that `w` is given, of shape `[1]`, exactly for PLIF neurons.
fn check_w(op: &'static str, cfg: &NeuronConfig, w: Option<&Tensor>, seq: &Tensor) -> Result<()> {
    match (cfg.kind, w) {
        (NeuronKind::Plif { .. }, None) => Err(CoreError::invalid(
            op,
            "a PLIF neuron needs its parameter w (shape [1], 1/tau = sigmoid(w))",
        )),
        (NeuronKind::Plif { .. }, Some(w)) => {
            seq.expect_same_device(op, w)?;
            if w.dims() != [1] {
                return Err(CoreError::shape(op, "w of shape [1]", w.shape()));
            }
            Ok(())
        }
        (_, Some(_)) => Err(CoreError::invalid(
            op,
            format!("w is the PLIF parameter; pass None for {:?}", cfg.kind),
        )),
        (_, None) => Ok(()),
    }
}

/// The value of `w` (0 when absent or on Meta, where nothing is computed).
fn read_w(op: &'static str, w: Option<&Tensor>) -> Result<f32> {
    let Some(w) = w else { return Ok(0.0) };
    let r = w.read::<f32>(op)?;
    let mut value = 0.0;
    compute(w.device(), |backend| {
        value = match backend {
            Compute::Cpu => r.host()?.first().copied().unwrap_or(0.0),
            // One value comes back to the host, which resolves the constants from it.
            Compute::Cuda(gpu) => crate::cuda::read_back::<f32>(gpu, r.cuda_ptr()?, 1)?[0],
        };
        Ok(())
    })?;
    Ok(value)
}
