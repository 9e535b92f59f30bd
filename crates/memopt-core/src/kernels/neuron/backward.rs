//! Backward through time on the CPU: one reverse pass over `T` per neuron, carrying the
//! gradient of the membrane state in a stack array.

use super::Surrogate;
use super::chunks::{BLOCKS_PER_CHUNK, CHUNK, SharedOut, for_each_chunk};
use super::config::{DecayGrad, Dynamics, fire, reset};
use super::surrogate::{atan_grad, sigmoid_grad};

/// Data of one backward call: sequences are `[T, n]`, states `[n]`, `partials` `T` slots per
/// block of [`super::PLIF_PARTIAL_NEURONS`] neurons, block-major (PLIF only).
pub(super) struct BackwardIo<'a> {
    pub steps: usize,
    pub n: usize,
    /// The spikes' gradient; `None` when it is read from `grad_x`, which then holds it on entry
    /// and the input gradient on return.
    pub grad_spikes: Option<&'a [f32]>,
    pub grad_v_final: Option<&'a [f32]>,
    pub h_seq: &'a [f32],
    pub v_init: Option<&'a [f32]>,
    pub grad_x: &'a mut [f32],
    pub grad_v_init: Option<&'a mut [f32]>,
    pub partials: Option<&'a mut [f32]>,
}

/// Runs the reverse recurrence for every neuron. For PLIF, each block's sum over its neurons of
/// `dL/dH[t] * dH[t]/dk` (`k = 1/tau`) goes to slot `t` of its row of `io.partials`.
pub(super) fn backward_cpu(d: &Dynamics, surrogate: Surrogate, io: BackwardIo<'_>) {
    macro_rules! run {
        ($sg:expr) => {
            match (d.hard, d.decay_grad) {
                (true, DecayGrad::None) => run::<true, false, _, _>(d, io, $sg, |_, _| 0.0),
                (false, DecayGrad::None) => run::<false, false, _, _>(d, io, $sg, |_, _| 0.0),
                (true, DecayGrad::DecayInput { k }) => {
                    run::<true, true, _, _>(d, io, $sg, move |h: f32, v: f32| (h - v) / k)
                }
                (false, DecayGrad::DecayInput { k }) => {
                    run::<false, true, _, _>(d, io, $sg, move |h: f32, v: f32| (h - v) / k)
                }
                (true, DecayGrad::NoDecayInput { vr }) => {
                    run::<true, true, _, _>(d, io, $sg, move |_: f32, v: f32| vr - v)
                }
                (false, DecayGrad::NoDecayInput { vr }) => {
                    run::<false, true, _, _>(d, io, $sg, move |_: f32, v: f32| vr - v)
                }
            }
        };
    }
    match surrogate {
        Surrogate::Sigmoid { alpha } => run!(move |z: f32| sigmoid_grad(alpha, z)),
        Surrogate::ATan { alpha } => run!(move |z: f32| atan_grad(alpha, z)),
    }
}

/// `dL/dH[t]` from `gv = dL/dV[t]` and `gs = dL/dS[t]`: through the reset
/// (`dV/dH = 1 - S + (v_reset - H) sg` hard, `1 - v_threshold sg` soft, the `sg` terms weighted
/// by `reset_grad`, 0 under detach_reset) and through the spike (`dS/dH = sg`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn grad_h<const HARD: bool>(gv: f32, gs: f32, h: f32, sg: f32, vth: f32, vr: f32, reset_grad: f32) -> f32 {
    let dv_dh = if HARD {
        (1.0 - fire(h, vth)) + (vr - h) * sg * reset_grad
    } else {
        1.0 - vth * sg * reset_grad
    };
    gv * dv_dh + gs * sg
}

fn run<const HARD: bool, const PLIF: bool, S, K>(d: &Dynamics, io: BackwardIo<'_>, surrogate: S, dh_dk: K)
where
    S: Fn(f32) -> f32 + Copy + Send + Sync,
    K: Fn(f32, f32) -> f32 + Copy + Send + Sync,
{
    if io.grad_spikes.is_some() {
        run_rows::<HARD, PLIF, false, S, K>(d, io, surrogate, dh_dk)
    } else {
        run_rows::<HARD, PLIF, true, S, K>(d, io, surrogate, dh_dk)
    }
}

fn run_rows<const HARD: bool, const PLIF: bool, const IN_PLACE: bool, S, K>(
    d: &Dynamics,
    io: BackwardIo<'_>,
    surrogate: S,
    dh_dk: K,
) where
    S: Fn(f32) -> f32 + Copy + Send + Sync,
    K: Fn(f32, f32) -> f32 + Copy + Send + Sync,
{
    let BackwardIo {
        steps,
        n,
        grad_spikes,
        grad_v_final,
        h_seq,
        v_init,
        grad_x,
        grad_v_init,
        partials,
    } = io;
    let Dynamics {
        dh_dv,
        dh_dx,
        v_threshold: vth,
        v_reset: vr,
        reset_grad,
        ..
    } = *d;
    let grad_x = SharedOut::new(grad_x);
    let grad_v_init = grad_v_init.map(SharedOut::new);
    for_each_chunk(
        n,
        steps,
        partials,
        #[inline(always)]
        |r, mut partial_row: Option<&mut [f32]>| {
            let len = r.len();
            // dL/dV[t] for the step being processed; starts as the gradient of the final state.
            let mut gv_buf = [0f32; CHUNK];
            let gv = &mut gv_buf[..len];
            if let Some(g) = grad_v_final {
                gv.copy_from_slice(&g[r.clone()]);
            }
            // PLIF only: V[t-1] of the first step, and the per-neuron dL/dH * dH/dk of the step.
            let mut vprev_buf = [0f32; CHUNK];
            let mut acc_buf = [0f32; CHUNK];
            let (vprev, acc) = (&mut vprev_buf[..len], &mut acc_buf[..len]);
            if PLIF {
                match v_init {
                    Some(vi) => vprev.copy_from_slice(&vi[r.clone()]),
                    None => vprev.fill(vr),
                }
            }
            for t in (0..steps).rev() {
                let row = t * n + r.start..t * n + r.end;
                let hs = &h_seq[row.clone()];
                // In place, the spikes' gradient is read from `gx` just before it is overwritten.
                let gss: &[f32] = if IN_PLACE {
                    &[]
                } else {
                    &grad_spikes.unwrap_or_default()[row.clone()]
                };
                // SAFETY: `row` is this task's chunk of time row `t`; no other slice of it is live.
                let gx = unsafe { grad_x.slice(row) };
                if PLIF {
                    let step = |g: &mut f32, h: f32, gs: f32, gx: &mut f32, a: &mut f32, vp: f32| {
                        let gh = grad_h::<HARD>(*g, gs, h, surrogate(h - vth), vth, vr, reset_grad);
                        *gx = gh * dh_dx;
                        *g = gh * dh_dv;
                        *a = gh * dh_dk(h, vp);
                    };
                    // V[t-1]: the reset of H[t-1], computed in the same pass, or the initial state.
                    if t > 0 {
                        let prev = &h_seq[(t - 1) * n + r.start..(t - 1) * n + r.end];
                        let v_of = |hp: f32| reset::<HARD>(hp, fire(hp, vth), vth, vr);
                        plif_row::<IN_PLACE>(gv, hs, gss, gx, acc, prev, v_of, step);
                    } else {
                        plif_row::<IN_PLACE>(gv, hs, gss, gx, acc, vprev, |v| v, step);
                    }
                    if let Some(rows) = partial_row.as_deref_mut() {
                        block_sums(acc, |b, s| rows[b * steps + t] = s);
                    }
                } else {
                    let step = |g: &mut f32, h: f32, gs: f32, gx: &mut f32| {
                        let gh = grad_h::<HARD>(*g, gs, h, surrogate(h - vth), vth, vr, reset_grad);
                        *gx = gh * dh_dx;
                        *g = gh * dh_dv;
                    };
                    if IN_PLACE {
                        for ((g, &h), gx) in gv.iter_mut().zip(hs).zip(gx.iter_mut()) {
                            step(g, h, *gx, gx);
                        }
                    } else {
                        for (((g, &h), gx), &gs) in gv.iter_mut().zip(hs).zip(gx.iter_mut()).zip(gss) {
                            step(g, h, gs, gx);
                        }
                    }
                }
            }
            if let Some(out) = &grad_v_init {
                // SAFETY: `r` is this task's own chunk of the state buffer.
                unsafe { out.slice(r) }.copy_from_slice(gv);
            }
        },
    );
}

/// One PLIF time row: `step(gv, h, gs, gx, acc, V[t-1])` per neuron, `V[t-1] = v_of(prev)`, with
/// the spikes' gradient from `gss` or (in place) from `gx` itself.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn plif_row<const IN_PLACE: bool>(
    gv: &mut [f32],
    hs: &[f32],
    gss: &[f32],
    gx: &mut [f32],
    acc: &mut [f32],
    prev: &[f32],
    v_of: impl Fn(f32) -> f32,
    step: impl Fn(&mut f32, f32, f32, &mut f32, &mut f32, f32),
) {
    let lanes = gv.iter_mut().zip(hs).zip(acc.iter_mut()).zip(prev);
    if IN_PLACE {
        for ((((g, &h), a), &p), gx) in lanes.zip(gx.iter_mut()) {
            step(g, h, *gx, gx, a, v_of(p));
        }
    } else {
        for (((((g, &h), a), &p), gx), &gs) in lanes.zip(gx.iter_mut()).zip(gss) {
            step(g, h, gs, gx, a, v_of(p));
        }
    }
}

/// The partial sums of `acc` per block of [`super::PLIF_PARTIAL_NEURONS`] neurons, each in f64
/// from -0.0 in neuron order and rounded to f32, given to `out(block, sum)`: the order of the
/// CUDA kernel's block sums, so the bits agree. The full blocks are summed side by side (one
/// accumulator per block, the same additions in the same order per block), which keeps the
/// additions of different blocks independent instead of one chain of dependent additions.
#[inline(always)]
fn block_sums(acc: &[f32], mut out: impl FnMut(usize, f32)) {
    const BLOCK: usize = super::PLIF_PARTIAL_NEURONS;
    let (full, rest) = acc.as_chunks::<BLOCK>();
    let mut sums = [-0.0f64; BLOCKS_PER_CHUNK];
    // A chunk holds at most BLOCKS_PER_CHUNK blocks; all of them (a constant count) but in the
    // last chunk.
    match <&[[f32; BLOCK]; BLOCKS_PER_CHUNK]>::try_from(full) {
        Ok(blocks) => add_columns(&mut sums, blocks),
        Err(_) => add_columns(&mut sums[..full.len()], full),
    }
    for (b, &s) in sums[..full.len()].iter().enumerate() {
        out(b, s as f32);
    }
    if !rest.is_empty() {
        out(full.len(), rest.iter().fold(-0.0f64, |s, &a| s + a as f64) as f32);
    }
}

/// `sums[b] += blocks[b][j]` (in f64) for `j` in order, the blocks side by side.
#[inline(always)]
fn add_columns<const BLOCK: usize>(sums: &mut [f64], blocks: &[[f32; BLOCK]]) {
    for j in 0..BLOCK {
        for (s, block) in sums.iter_mut().zip(blocks) {
            *s += block[j] as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The side-by-side block sums are, bit for bit, each block's sum in neuron order (f64 from
    /// -0.0, rounded to f32), the order the CUDA kernel adds in: for a whole chunk, a chunk of
    /// whole blocks and one ending in a partial block.
    #[test]
    fn block_sums_add_each_block_in_neuron_order() {
        const BLOCK: usize = crate::kernels::neuron::PLIF_PARTIAL_NEURONS;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Magnitudes from 2^-20 to 2^20, both signs: f64 sums that round differently when
            // the order changes.
            let m = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            m * 2f32.powi((state % 41) as i32 - 20)
        };
        let acc: Vec<f32> = (0..CHUNK).map(|_| next()).collect();
        for len in [CHUNK, 3 * BLOCK, 5 * BLOCK + 17, 9, 0] {
            let acc = &acc[..len];
            let mut got = vec![f32::NAN; len.div_ceil(BLOCK)];
            block_sums(acc, |b, s| got[b] = s);
            let want: Vec<f32> = acc
                .chunks(BLOCK)
                .map(|block| {
                    let mut s = -0.0f64;
                    for &a in block {
                        s += a as f64;
                    }
                    s as f32
                })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{len} neurons");
        }
    }
}
