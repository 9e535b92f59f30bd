//! The CPU arithmetic of BatchNorm's per-channel sums, shared by the whole-batch kernels and the
//! chunked entry points, so that both add the same numbers in the same order.
//!
//! Every sum is per plane first (one sample, one channel: `sum_map_f64`'s fixed order), then the
//! plane sums are folded into a per-channel accumulator one sample after the other: the forward
//! statistics in ascending sample order, the backward sums in descending sample order. A fold
//! over a batch therefore equals folds over consecutive parts of it, the parts taken in the same
//! direction (first part first in forward, last part first in backward: the orders in which a
//! chunked segment runs its time chunks). The forward sums are of `x - shift`, with `shift` the
//! channel's first value of the first sample, so that the one-pass variance
//! `sum((x - shift)^2) / m - (sum(x - shift) / m)^2` does not cancel catastrophically when the
//! mean is large against the spread.

use super::{Layout, at};
use crate::kernels::accum::{sum_f64, sum_map_f64, sum_zip_f64};
use rayon::prelude::*;

/// Direction in which plane sums are folded into the per-channel accumulators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fold {
    /// First sample first (forward statistics).
    Ascending,
    /// Last sample first (backward sums).
    Descending,
}

/// `shift[c]` = the first value of sample 0's plane of channel `c` (needs `b >= 1`, `s >= 1`).
pub(super) fn first_sample_shift(l: Layout, xs: &[f32], shift: &mut [f64]) {
    for (c, k) in shift.iter_mut().enumerate().take(l.c) {
        *k = xs[c * l.s] as f64;
    }
}

/// `part[2p] = sum(x - shift)`, `part[2p + 1] = sum((x - shift)^2)` over plane `p`, in f64.
pub(super) fn stat_plane_sums(l: Layout, xs: &[f32], shift: &[f64], part: &mut [f64]) {
    part.par_chunks_mut(2)
        .enumerate()
        .with_min_len(l.min_planes())
        .for_each(|(p, pair)| {
            let k = shift[p % l.c];
            let xp = &xs[l.plane(p)];
            pair[0] = sum_map_f64(xp, |v| v as f64 - k);
            pair[1] = sum_map_f64(xp, |v| {
                let d = v as f64 - k;
                d * d
            });
        });
}

/// `part[2p] = sum(g)`, `part[2p + 1] = sum(g * (x - mean))` over plane `p`, in f64.
pub(super) fn grad_plane_sums(l: Layout, gs: &[f32], xs: &[f32], means: &[f32], part: &mut [f64]) {
    part.par_chunks_mut(2)
        .enumerate()
        .with_min_len(l.min_planes())
        .for_each(|(p, pair)| {
            let (g, xp) = (&gs[l.plane(p)], &xs[l.plane(p)]);
            let mu = means[p % l.c] as f64;
            pair[0] = sum_f64(g);
            pair[1] = sum_zip_f64(g, xp, |g, x| g as f64 * (x as f64 - mu));
        });
}

/// Adds the plane pairs of `part` (`2 * B * C` values) to `first[c]` and `second[c]`, one
/// sample after the other in the direction `fold`.
pub(super) fn fold_pairs(l: Layout, part: &[f64], first: &mut [f64], second: &mut [f64], fold: Fold) {
    let row = 2 * l.c.max(1);
    let mut add = |r: &[f64]| {
        for c in 0..l.c {
            first[c] += r[2 * c];
            second[c] += r[2 * c + 1];
        }
    };
    match fold {
        Fold::Ascending => part.chunks_exact(row).for_each(&mut add),
        Fold::Descending => part.chunks_exact(row).rev().for_each(&mut add),
    }
}

/// The batch mean and biased variance of a channel from its shifted sums over `m` values.
#[inline]
pub(super) fn mean_var(shift: f64, s1: f64, s2: f64, m: f64) -> (f64, f64) {
    let d = s1 / m;
    (shift + d, (s2 / m - d * d).max(0.0))
}

/// `1 / sqrt(var + eps)` as saved for backward.
#[inline]
pub(super) fn invstd(var: f64, eps: f32) -> f32 {
    (1.0 / (var + eps as f64).sqrt()) as f32
}

/// The running-statistics update of one channel: `(1 - momentum) * old + momentum * batch`,
/// the variance unbiased by `m / (m - 1)`.
#[inline]
pub(super) fn running_update(rm: &mut f32, rv: &mut f32, mean: f64, var: f64, momentum: f32, m: f64) {
    let (mo, unbias) = (momentum as f64, m / (m - 1.0));
    *rm = ((1.0 - mo) * *rm as f64 + mo * mean) as f32;
    *rv = ((1.0 - mo) * *rv as f64 + mo * var * unbias) as f32;
}

/// `y = (x - mean) * (invstd * weight) + bias` over every plane of `ys`.
pub(super) fn normalize(
    l: Layout,
    xs: &[f32],
    ys: &mut [f32],
    (means, invstds): (&[f32], &[f32]),
    (weight, bias): (Option<&[f32]>, Option<&[f32]>),
) {
    l.for_planes(ys, |p, yp| {
        let c = p % l.c;
        let (mu, scale, shift) = (means[c], invstds[c] * at(weight, c, 1.0), at(bias, c, 0.0));
        for (y, &x) in yp.iter_mut().zip(&xs[l.plane(p)]) {
            *y = (x - mu) * scale + shift;
        }
    });
}

/// The per-channel sums the input gradient needs, over all `m` values of each channel.
pub(super) struct GradSums<'a> {
    pub(super) sum_g: &'a [f64],
    pub(super) dot: &'a [f64],
    pub(super) m: f64,
}

/// `grad_x = invstd * w * (g - sum_g / m - (x - mean) * dot * invstd^2 / m)` for every plane of
/// `out`, reading `g` from `gs` (`None`: `out` holds `g` and is overwritten in place).
pub(super) fn input_grad(
    l: Layout,
    out: &mut [f32],
    gs: Option<&[f32]>,
    xs: &[f32],
    (means, invstds, weight): (&[f32], &[f32], Option<&[f32]>),
    sums: &GradSums<'_>,
) {
    if sums.m <= 0.0 {
        return;
    }
    // The channel's constants, once per plane (the inner loop is then a few f32 operations;
    // the values are the same whoever computes them).
    let constants = |p: usize| {
        let c = p % l.c;
        let invstd = invstds[c] as f64;
        let a = (invstd * at(weight, c, 1.0) as f64) as f32;
        let mean_g = (sums.sum_g[c] / sums.m) as f32;
        let k = (sums.dot[c] * invstd * invstd / sums.m) as f32;
        (a, mean_g, k, means[c])
    };
    let grad_x =
        |(a, mean_g, k, mean): (f32, f32, f32, f32), g: f32, x: f32| a * (g - mean_g - (x - mean) * k);
    match gs {
        Some(gs) => l.for_planes(out, |p, op| {
            let c = constants(p);
            let (gp, xp) = (&gs[l.plane(p)], &xs[l.plane(p)]);
            for (o, (&g, &x)) in op.iter_mut().zip(gp.iter().zip(xp)) {
                *o = grad_x(c, g, x);
            }
        }),
        None => l.for_planes(out, |p, op| {
            let c = constants(p);
            for (o, &x) in op.iter_mut().zip(&xs[l.plane(p)]) {
                *o = grad_x(c, *o, x);
            }
        }),
    }
}

/// `grad_bias = sum_g`, `grad_weight = dot * invstd` (each when asked for).
pub(super) fn param_grads(
    sum_g: &[f64],
    dot: &[f64],
    invstds: &[f32],
    weight: Option<&mut [f32]>,
    bias: Option<&mut [f32]>,
) {
    if let Some(b) = bias {
        for (b, &s) in b.iter_mut().zip(sum_g) {
            *b = s as f32;
        }
    }
    if let Some(w) = weight {
        for ((w, &d), &i) in w.iter_mut().zip(dot).zip(invstds) {
            *w = (d * i as f64) as f32;
        }
    }
}
