//! The forward time loop on the CPU: charge, fire, reset, one pass over `T` per neuron.

use super::chunks::{CHUNK, SharedOut, for_each_chunk};
use super::config::{Charge, Dynamics, fire, reset};

/// Data of one forward call: `x` is `[T, n]` (absent when it is read from `h_seq`, which then
/// holds the input on entry and the membrane potentials on return, or, without `h_seq`, from
/// `spikes`, which then holds the input on entry and the spikes on return), the states `[n]`. Without
/// `spikes` the spikes are computed (they drive the reset) but not kept.
pub(super) struct ForwardIo<'a> {
    pub steps: usize,
    pub n: usize,
    pub x: Option<&'a [f32]>,
    pub v_init: Option<&'a [f32]>,
    pub spikes: Option<&'a mut [f32]>,
    pub h_seq: Option<&'a mut [f32]>,
    pub v_final: &'a mut [f32],
}

/// Runs the forward recurrence for every neuron.
pub(super) fn forward_cpu(d: &Dynamics, io: ForwardIo<'_>) {
    macro_rules! run {
        ($charge:expr) => {
            if d.hard {
                run::<true, _>(d, io, $charge)
            } else {
                run::<false, _>(d, io, $charge)
            }
        };
    }
    match d.charge {
        Charge::If => run!(|v: f32, x: f32| x + v),
        Charge::Decay { k, vr } => run!(move |v: f32, x: f32| (x - (v - vr)) * k + v),
        Charge::NoDecay { k, vr } => run!(move |v: f32, x: f32| (x - k * (v - vr)) + v),
    }
}

fn run<const HARD: bool, C>(d: &Dynamics, io: ForwardIo<'_>, charge: C)
where
    C: Fn(f32, f32) -> f32 + Copy + Send + Sync,
{
    let ForwardIo {
        steps,
        n,
        x,
        v_init,
        spikes,
        h_seq,
        v_final,
    } = io;
    let (vth, vr) = (d.v_threshold, d.v_reset);
    let spikes = spikes.map(SharedOut::new);
    let h_seq = h_seq.map(SharedOut::new);
    let v_final = SharedOut::new(v_final);
    for_each_chunk(
        n,
        steps,
        None,
        #[inline(always)]
        |r, _| {
            let mut state = [0f32; CHUNK];
            let v = &mut state[..r.len()];
            // Where the spikes of a row go when they are not kept.
            let mut discarded = [0f32; CHUNK];
            match v_init {
                Some(vi) => v.copy_from_slice(&vi[r.clone()]),
                None => v.fill(vr),
            }
            for t in 0..steps {
                let row = t * n + r.start..t * n + r.end;
                let ss: &mut [f32] = match &spikes {
                    // SAFETY: `row` is this task's chunk of time row `t`; no other slice of it is
                    // live.
                    Some(spikes) => unsafe { spikes.slice(row.clone()) },
                    None => &mut discarded[..r.len()],
                };
                match (&h_seq, x) {
                    (Some(hs), None) => {
                        // In place: each potential overwrites the input it was charged from.
                        // SAFETY: as above, for the `h_seq` buffer.
                        let hs = unsafe { hs.slice(row) };
                        for ((v, s), h) in v.iter_mut().zip(ss.iter_mut()).zip(hs.iter_mut()) {
                            let hv = charge(*v, *h);
                            let sp = fire(hv, vth);
                            *h = hv;
                            *s = sp;
                            *v = reset::<HARD>(hv, sp, vth, vr);
                        }
                    }
                    (Some(hs), Some(x)) => {
                        let xs = &x[row.clone()];
                        // SAFETY: as above, for the `h_seq` buffer.
                        let hs = unsafe { hs.slice(row) };
                        for (((v, &x), s), h) in v.iter_mut().zip(xs).zip(ss.iter_mut()).zip(hs.iter_mut()) {
                            let hv = charge(*v, x);
                            let sp = fire(hv, vth);
                            *h = hv;
                            *s = sp;
                            *v = reset::<HARD>(hv, sp, vth, vr);
                        }
                    }
                    (None, None) => {
                        // In place: each spike overwrites the input it was charged from.
                        for (v, s) in v.iter_mut().zip(ss.iter_mut()) {
                            let hv = charge(*v, *s);
                            let sp = fire(hv, vth);
                            *s = sp;
                            *v = reset::<HARD>(hv, sp, vth, vr);
                        }
                    }
                    (None, Some(x)) => {
                        let xs = &x[row];
                        for ((v, &x), s) in v.iter_mut().zip(xs).zip(ss.iter_mut()) {
                            let hv = charge(*v, x);
                            let sp = fire(hv, vth);
                            *s = sp;
                            *v = reset::<HARD>(hv, sp, vth, vr);
                        }
                    }
                }
            }
            // SAFETY: `r` is this task's own chunk of the state buffer.
            unsafe { v_final.slice(r) }.copy_from_slice(v);
        },
    );
}
