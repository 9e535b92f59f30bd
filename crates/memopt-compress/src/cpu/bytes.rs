//! Bool/U8 on the CPU: one byte (0 or 1) per value.

use super::bits::non_binary;
use super::word::{SpikeElem, SpikeWord, is_bad};
use super::{CHUNK, PAR_THRESHOLD};
use crate::Result;
use memopt_core::CoreError;
use rayon::prelude::*;

/// Writes 1 to `dst[i]` for every `src[i]` other than +-0, else 0. With `check`, a value other
/// than 0 and 1 is an error naming the first one.
pub fn pack_bytes<E: SpikeElem>(src: &[E], dst: &mut [u8], check: bool) -> Result<()> {
    if dst.len() != src.len() {
        return Err(CoreError::shape("u8 pack", format!("{} bytes", src.len()), dst.len()).into());
    }
    let words: &[E::Word] = bytemuck::cast_slice(src);
    let run = |s: &[E::Word], d: &mut [u8]| {
        let mut bad = false;
        for (o, &w) in d.iter_mut().zip(s) {
            *o = !w.is_zero_value() as u8;
            bad |= check && is_bad(w, E::ONE);
        }
        bad
    };
    let bad = if src.len() < PAR_THRESHOLD {
        run(words, dst)
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(words.par_chunks(CHUNK))
            .map(|(d, s)| run(s, d))
            .reduce(|| false, |a, b| a | b)
    };
    if bad {
        return Err(non_binary("u8", src));
    }
    Ok(())
}

/// Writes 1.0 to `dst[i]` for every nonzero byte `src[i]`, else +0.0.
pub fn unpack_bytes<E: SpikeElem>(src: &[u8], dst: &mut [E]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(CoreError::shape("u8 unpack", format!("{} bytes", dst.len()), src.len()).into());
    }
    let words: &mut [E::Word] = bytemuck::cast_slice_mut(dst);
    let run = |s: &[u8], d: &mut [E::Word]| {
        for (o, &b) in d.iter_mut().zip(s) {
            *o = if b != 0 { E::ONE } else { E::Word::ZERO };
        }
    };
    if src.len() < PAR_THRESHOLD {
        run(src, words);
    } else {
        words
            .par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| run(s, d));
    }
    Ok(())
}
