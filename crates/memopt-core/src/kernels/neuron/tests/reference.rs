//! A plain scalar reference of the multi-step neuron in f64, written from the equations (not
//! from the fast kernels): one neuron at a time, forward then backward through time.

// Plain indexed loops on purpose: the reference should read like the equations.
#![allow(clippy::needless_range_loop)]

use crate::kernels::{NeuronConfig, NeuronKind, Surrogate};

/// Inputs of one reference run; sequences are `[steps, n]` row-major.
pub struct RefInput<'a> {
    pub cfg: NeuronConfig,
    pub steps: usize,
    pub n: usize,
    pub x: &'a [f32],
    pub v_init: Option<&'a [f32]>,
    pub w: f32,
    pub grad_spikes: &'a [f32],
    pub grad_v_final: Option<&'a [f32]>,
}

/// Everything the reference computes.
pub struct RefOutput {
    pub spikes: Vec<f64>,
    pub h_seq: Vec<f64>,
    pub v_final: Vec<f64>,
    pub grad_x: Vec<f64>,
    pub grad_v_init: Vec<f64>,
    pub grad_w: f64,
    /// Sum of the magnitudes of the terms of grad_w (its conditioning).
    pub grad_w_scale: f64,
    /// Smallest `|H - v_threshold|` seen: below ~1e-4 an f32 run may fire differently.
    pub min_margin: f64,
}

fn surrogate_grad(s: Surrogate, x: f64) -> f64 {
    match s {
        Surrogate::Sigmoid { alpha } => {
            let a = alpha as f64;
            let sg = 1.0 / (1.0 + (-a * x).exp());
            a * sg * (1.0 - sg)
        }
        Surrogate::ATan { alpha } => {
            let a = alpha as f64;
            let u = std::f64::consts::PI / 2.0 * a * x;
            a / 2.0 / (1.0 + u * u)
        }
    }
}

pub fn reference(inp: &RefInput<'_>) -> RefOutput {
    let cfg = inp.cfg;
    let (steps, n) = (inp.steps, inp.n);
    let vth = cfg.v_threshold as f64;
    let hard = cfg.v_reset.is_some();
    let vr = cfg.v_reset.unwrap_or(0.0) as f64;
    // k = 1/tau; decay: whether the input is scaled by k.
    let (k, decay) = match cfg.kind {
        NeuronKind::If => (0.0, false),
        NeuronKind::Lif { tau, decay_input } => (1.0 / tau as f64, decay_input),
        NeuronKind::Plif { decay_input } => (1.0 / (1.0 + (-(inp.w as f64)).exp()), decay_input),
    };
    let is_if = matches!(cfg.kind, NeuronKind::If);
    let mut out = RefOutput {
        spikes: vec![0.0; steps * n],
        h_seq: vec![0.0; steps * n],
        v_final: vec![0.0; n],
        grad_x: vec![0.0; steps * n],
        grad_v_init: vec![0.0; n],
        grad_w: 0.0,
        grad_w_scale: 0.0,
        min_margin: f64::INFINITY,
    };
    let mut grad_k = 0.0;
    for i in 0..n {
        // Forward, remembering V before each step.
        let mut v = match inp.v_init {
            Some(v0) => v0[i] as f64,
            None => vr,
        };
        let mut v_before = vec![0.0; steps];
        for t in 0..steps {
            let x = inp.x[t * n + i] as f64;
            v_before[t] = v;
            let h = if is_if {
                v + x
            } else if decay {
                v + (x - (v - vr)) * k
            } else {
                v - (v - vr) * k + x
            };
            let s = if h >= vth { 1.0 } else { 0.0 };
            out.min_margin = out.min_margin.min((h - vth).abs());
            out.h_seq[t * n + i] = h;
            out.spikes[t * n + i] = s;
            v = if hard { h * (1.0 - s) + vr * s } else { h - s * vth };
        }
        out.v_final[i] = v;

        // Backward: gv is dL/dV after step t.
        let mut gv = match inp.grad_v_final {
            Some(g) => g[i] as f64,
            None => 0.0,
        };
        for t in (0..steps).rev() {
            let h = out.h_seq[t * n + i];
            let s = out.spikes[t * n + i];
            let sg = surrogate_grad(cfg.surrogate, h - vth);
            let dv_dh = match (hard, cfg.detach_reset) {
                (true, true) => 1.0 - s,
                (true, false) => 1.0 - s + (vr - h) * sg,
                (false, true) => 1.0,
                (false, false) => 1.0 - vth * sg,
            };
            let gh = gv * dv_dh + inp.grad_spikes[t * n + i] as f64 * sg;
            let (dh_dx, dh_dv) = if is_if {
                (1.0, 1.0)
            } else {
                (if decay { k } else { 1.0 }, 1.0 - k)
            };
            out.grad_x[t * n + i] = gh * dh_dx;
            if let NeuronKind::Plif { .. } = cfg.kind {
                let x = inp.x[t * n + i] as f64;
                let vp = v_before[t];
                let dh_dk = if decay { x - (vp - vr) } else { -(vp - vr) };
                grad_k += gh * dh_dk;
                out.grad_w_scale += (gh * dh_dk).abs();
            }
            gv = gh * dh_dv;
        }
        out.grad_v_init[i] = gv;
    }
    out.grad_w = grad_k * k * (1.0 - k);
    out.grad_w_scale *= k * (1.0 - k);
    out
}
