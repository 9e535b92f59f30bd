//! Spike counts on the CPU: one byte per pooled-spike value, the count of spikes it averages.

use super::{CHUNK, PAR_THRESHOLD};
use crate::Result;
use memopt_core::CoreError;
use rayon::prelude::*;

/// The count `c` whose mean over `window` spikes is `v`: `round(v * window)`. Exact for every
/// value `((c as f64) / window) as f32` with `c` in `0..=window <= 255`: that value is within a
/// relative 2^-24 of `c / window`, so `v * window` is within 255 * 2^-24 of `c`.
#[inline]
pub fn count_of(v: f32, window: f64) -> u8 {
    (v as f64 * window).round() as u8
}

/// The mean of `c` spikes over `window`, computed as average pooling computes it: the f64
/// quotient rounded to f32.
#[inline]
pub fn mean_of(c: u8, window: f64) -> f32 {
    (c as f64 / window) as f32
}

/// Writes the spike count of every pooled-spike value of `src` (means over `window` spikes) to
/// `dst`.
pub fn pack_counts(src: &[f32], dst: &mut [u8], window: u16) -> Result<()> {
    if dst.len() != src.len() {
        return Err(CoreError::shape("spike_counts pack", format!("{} bytes", src.len()), dst.len()).into());
    }
    let w = window as f64;
    map_into(src, dst, |v| count_of(v, w));
    Ok(())
}

/// Writes the mean over `window` spikes of every count of `src` to `dst`.
pub fn unpack_counts(src: &[u8], dst: &mut [f32], window: u16) -> Result<()> {
    if dst.len() != src.len() {
        return Err(
            CoreError::shape("spike_counts unpack", format!("{} values", src.len()), dst.len()).into(),
        );
    }
    let w = window as f64;
    map_into(src, dst, |c| mean_of(c, w));
    Ok(())
}

/// `dst[i] = f(src[i])`: on the calling thread below [`PAR_THRESHOLD`] values, else in
/// parallel chunks of [`CHUNK`] (each value on its own, so the result does not depend on the
/// split).
fn map_into<S: Copy + Sync, D: Send>(src: &[S], dst: &mut [D], f: impl Fn(S) -> D + Sync) {
    let run = |s: &[S], d: &mut [D]| {
        for (o, &v) in d.iter_mut().zip(s) {
            *o = f(v);
        }
    };
    if src.len() < PAR_THRESHOLD {
        run(src, dst);
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| run(s, d));
    }
}
