//! Neuron configuration (SpikingJelly's IF, LIF and parametric LIF) and the per-call constants
//! the kernels derive from it.

use super::Surrogate;
use crate::kernels::sigmoid_f32;
use crate::{CoreError, Result};
use serde::{Deserialize, Serialize};

/// The neuron model: how the membrane charges from `V` (state) and `X` (input) to `H`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum NeuronKind {
    /// Leaky integrate-and-fire with membrane time constant `tau` (in time steps, > 1).
    /// `decay_input`: `H = V + (X - (V - V_reset)) / tau`; otherwise
    /// `H = V - (V - V_reset) / tau + X` (`V_reset` is 0 under soft reset).
    Lif {
        /// Membrane time constant, in time steps (> 1).
        tau: f32,
        /// Whether the input is divided by `tau` too.
        decay_input: bool,
    },
    /// Integrate-and-fire: `H = V + X`.
    If,
    /// Parametric LIF: LIF with `1 / tau = sigmoid(w)` for a learned scalar `w`.
    Plif {
        /// Whether the input is scaled by `1 / tau` too.
        decay_input: bool,
    },
}

/// A multi-step spiking neuron, as SpikingJelly's `IFNode` / `LIFNode` / `ParametricLIFNode`.
/// Fire: `S = 1` when `H >= v_threshold`. Hard reset: `V = H (1 - S) + v_reset S`; soft reset:
/// `V = H - S v_threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NeuronConfig {
    /// The charge model.
    pub kind: NeuronKind,
    /// Firing threshold (membrane potential units).
    pub v_threshold: f32,
    /// Reset potential for hard reset; `None` means soft reset (subtract the threshold).
    pub v_reset: Option<f32>,
    /// Whether backward ignores the reset's dependency on the spike.
    pub detach_reset: bool,
    /// Surrogate gradient of the firing function.
    pub surrogate: Surrogate,
}

impl NeuronConfig {
    fn with_kind(kind: NeuronKind) -> Self {
        NeuronConfig {
            kind,
            v_threshold: 1.0,
            v_reset: Some(0.0),
            detach_reset: false,
            surrogate: Surrogate::default(),
        }
    }

    /// LIF with time constant `tau` (time steps) and SpikingJelly's defaults: `decay_input`,
    /// `v_threshold` 1, hard reset to 0, no `detach_reset`, `Sigmoid { alpha: 4 }`.
    pub fn lif(tau: f32) -> Self {
        Self::with_kind(NeuronKind::Lif {
            tau,
            decay_input: true,
        })
    }

    /// IF with SpikingJelly's defaults (as [`NeuronConfig::lif`]).
    pub fn if_neuron() -> Self {
        Self::with_kind(NeuronKind::If)
    }

    /// Parametric LIF with SpikingJelly's defaults (as [`NeuronConfig::lif`]); its parameter `w`
    /// is passed to the kernels (SpikingJelly initialises it to `-ln(init_tau - 1)`).
    pub fn plif() -> Self {
        Self::with_kind(NeuronKind::Plif { decay_input: true })
    }

    /// Whether the reset is soft (`v_reset` is `None`).
    pub fn soft_reset(&self) -> bool {
        self.v_reset.is_none()
    }

    /// The membrane potential a neuron starts from when no initial state is given: `v_reset`,
    /// or 0 under soft reset.
    pub fn v_rest(&self) -> f32 {
        self.v_reset.unwrap_or(0.0)
    }

    /// Checks the parameters: LIF `tau > 1` and finite, surrogate `alpha > 0` and finite,
    /// finite `v_threshold` and `v_reset`.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "NeuronConfig::validate";
        if let NeuronKind::Lif { tau, .. } = self.kind
            && !(tau > 1.0 && tau.is_finite())
        {
            return Err(CoreError::invalid(
                OP,
                format!("LIF tau must be finite and > 1 (time steps), got {tau}"),
            ));
        }
        let alpha = self.surrogate.alpha();
        if !(alpha > 0.0 && alpha.is_finite()) {
            return Err(CoreError::invalid(
                OP,
                format!("surrogate alpha must be finite and > 0, got {alpha}"),
            ));
        }
        if !self.v_threshold.is_finite() {
            return Err(CoreError::invalid(
                OP,
                format!("v_threshold must be finite, got {}", self.v_threshold),
            ));
        }
        if let Some(v) = self.v_reset
            && !v.is_finite()
        {
            return Err(CoreError::invalid(
                OP,
                format!("v_reset must be finite or None (soft reset), got {v}"),
            ));
        }
        Ok(())
    }
}

/// How `H` is computed from `V` and `X`, in the form of SpikingJelly's CUDA multi-step kernels
/// (`auto_cuda/neuron_kernel`): `k = 1/tau` (for LIF computed in f64 and rounded to f32, as
/// SpikingJelly passes `1.0 / tau` to the kernel; for PLIF `sigmoid(w)`) and `vr` the reset
/// potential (0 under soft reset).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Charge {
    /// `X + V`.
    If,
    /// `(X - (V - vr)) * k + V`.
    Decay { k: f32, vr: f32 },
    /// `(X - k * (V - vr)) + V`.
    NoDecay { k: f32, vr: f32 },
}

/// How the PLIF parameter's gradient is accumulated (`dH/dk` with `k = 1/tau`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum DecayGrad {
    /// Not a PLIF neuron.
    None,
    /// `dH/dk = (H - V) / k` (decay_input), as SpikingJelly's kernel computes it.
    DecayInput { k: f32 },
    /// `dH/dk = vr - V` (no decay of the input).
    NoDecayInput { vr: f32 },
}

/// Constants of one kernel call, resolved from a config and (for PLIF) the value of `w`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Dynamics {
    pub charge: Charge,
    /// `dH/dV`.
    pub dh_dv: f32,
    /// `dH/dX`.
    pub dh_dx: f32,
    pub v_threshold: f32,
    /// Reset potential under hard reset; 0 under soft reset. Either way also the initial
    /// potential when none is given.
    pub v_reset: f32,
    pub hard: bool,
    /// 0 with detach_reset, 1 without: the weight of the reset's dependency on the spike.
    pub reset_grad: f32,
    pub decay_grad: DecayGrad,
    /// `dk/dw = k (1 - k)` for PLIF (0 otherwise).
    pub dk_dw: f32,
}

impl Dynamics {
    /// Resolves `cfg` (already validated) with the PLIF parameter `w` (ignored for IF and LIF).
    pub fn new(cfg: &NeuronConfig, w: f32) -> Self {
        let vr = cfg.v_rest();
        let (k, decay_input) = match cfg.kind {
            NeuronKind::If => (0.0, false),
            NeuronKind::Lif { tau, decay_input } => ((1.0 / tau as f64) as f32, decay_input),
            NeuronKind::Plif { decay_input } => (sigmoid_f32(w), decay_input),
        };
        let (charge, dh_dv, dh_dx) = match (cfg.kind, decay_input) {
            (NeuronKind::If, _) => (Charge::If, 1.0, 1.0),
            (_, true) => (Charge::Decay { k, vr }, 1.0 - k, k),
            (_, false) => (Charge::NoDecay { k, vr }, 1.0 - k, 1.0),
        };
        let (decay_grad, dk_dw) = match (cfg.kind, decay_input) {
            (NeuronKind::Plif { .. }, true) => (DecayGrad::DecayInput { k }, k * (1.0 - k)),
            (NeuronKind::Plif { .. }, false) => (DecayGrad::NoDecayInput { vr }, k * (1.0 - k)),
            _ => (DecayGrad::None, 0.0),
        };
        Dynamics {
            charge,
            dh_dv,
            dh_dx,
            v_threshold: cfg.v_threshold,
            v_reset: vr,
            hard: !cfg.soft_reset(),
            reset_grad: if cfg.detach_reset { 0.0 } else { 1.0 },
            decay_grad,
            dk_dw,
        }
    }
}

/// The state after firing: hard `H (1 - S) + v_reset S`, soft `H - S v_threshold`.
#[inline(always)]
pub(super) fn reset<const HARD: bool>(h: f32, s: f32, v_threshold: f32, v_reset: f32) -> f32 {
    if HARD {
        h * (1.0 - s) + v_reset * s
    } else {
        h - v_threshold * s
    }
}

/// The spike: 1 when `h >= v_threshold` (SpikingJelly's `heaviside(h - v_threshold)`).
#[inline(always)]
pub(super) fn fire(h: f32, v_threshold: f32) -> f32 {
    if h >= v_threshold { 1.0 } else { 0.0 }
}
