//! BitSpike on the CPU: 1 bit per value, value `8j+i` in bit `i` (LSB first) of byte `j`
//! (numpy `packbits(bitorder='little')`), the last byte zero-padded.

use super::word::{SpikeElem, SpikeWord, first_non_binary, is_bad};
use super::{CHUNK, PAR_THRESHOLD};
use crate::{CompressError, Result};
use memopt_core::CoreError;
use rayon::prelude::*;

/// Packs `src` into `dst` (`ceil(len/8)` bytes): bit set for every value other than +-0.
/// With `check`, a value other than 0 and 1 is an error naming the first one (`dst` is then
/// partly written).
pub fn pack_bits<E: SpikeElem>(src: &[E], dst: &mut [u8], check: bool) -> Result<()> {
    const OP: &str = "bit_spike pack";
    if dst.len() != src.len().div_ceil(8) {
        return Err(CoreError::shape(
            OP,
            format!("{} bytes for {} values", src.len().div_ceil(8), src.len()),
            format!("{} bytes", dst.len()),
        )
        .into());
    }
    let words: &[E::Word] = bytemuck::cast_slice(src);
    let bad = match check {
        true => pack_par::<E::Word, true>(words, E::ONE, dst),
        false => pack_par::<E::Word, false>(words, E::ONE, dst),
    };
    if bad {
        return Err(non_binary("bit_spike", src));
    }
    Ok(())
}

/// The error for `values`, which are known to hold a non-binary value.
pub(crate) fn non_binary<E: SpikeElem>(compressor: &'static str, values: &[E]) -> CompressError {
    // Callers only get here after a kernel saw a bad value, so the search finds it.
    let index = first_non_binary(values).unwrap_or(0);
    CompressError::NonBinary {
        compressor,
        index: index as u64,
        value: values.get(index).map_or(f64::NAN, |v| v.value_f64()),
    }
}

fn pack_par<W: SpikeWord, const CHECK: bool>(src: &[W], one: W, dst: &mut [u8]) -> bool {
    if src.len() < PAR_THRESHOLD {
        return pack_serial::<W, CHECK>(src, one, dst);
    }
    dst.par_chunks_mut(CHUNK / 8)
        .zip(src.par_chunks(CHUNK))
        .map(|(d, s)| pack_serial::<W, CHECK>(s, one, d))
        .reduce(|| false, |a, b| a | b)
}

/// Packs `src` into `dst` (`ceil(src.len()/8)` bytes); returns whether a non-binary value was
/// seen (only computed with `CHECK`).
#[inline]
fn pack_serial<W: SpikeWord, const CHECK: bool>(src: &[W], one: W, dst: &mut [u8]) -> bool {
    let mut bad = false;
    let full = src.len() / 8;
    let (body, tail) = dst.split_at_mut(full);
    for (o, c) in body.iter_mut().zip(src.chunks_exact(8)) {
        let mut byte = 0u8;
        let mut b = false;
        for (i, &w) in c.iter().enumerate() {
            byte |= (!w.is_zero_value() as u8) << i;
            if CHECK {
                b |= is_bad(w, one);
            }
        }
        *o = byte;
        bad |= b;
    }
    if let Some(o) = tail.first_mut() {
        let mut byte = 0u8;
        for (i, &w) in src[full * 8..].iter().enumerate() {
            byte |= (!w.is_zero_value() as u8) << i;
            if CHECK {
                bad |= is_bad(w, one);
            }
        }
        *o = byte;
    }
    bad
}

/// Unpacks `src` (`ceil(dst.len()/8)` bytes) into `dst`: 1.0 for a set bit, +0.0 otherwise.
/// Padding bits of the last byte are ignored.
pub fn unpack_bits<E: SpikeElem>(src: &[u8], dst: &mut [E]) -> Result<()> {
    const OP: &str = "bit_spike unpack";
    if src.len() != dst.len().div_ceil(8) {
        return Err(CoreError::shape(
            OP,
            format!("{} bytes for {} values", dst.len().div_ceil(8), dst.len()),
            format!("{} bytes", src.len()),
        )
        .into());
    }
    let words: &mut [E::Word] = bytemuck::cast_slice_mut(dst);
    let lut = Lut::new(E::ONE);
    if words.len() < PAR_THRESHOLD {
        unpack_serial(src, &lut, words);
    } else {
        words
            .par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK / 8))
            .for_each(|(d, s)| unpack_serial(s, &lut, d));
    }
    Ok(())
}

/// The 8 words each byte value unpacks to.
struct Lut<W>(Box<[[W; 8]; 256]>);

impl<W: SpikeWord> Lut<W> {
    fn new(one: W) -> Self {
        let mut t = Box::new([[W::ZERO; 8]; 256]);
        for (byte, row) in t.iter_mut().enumerate() {
            for (i, w) in row.iter_mut().enumerate() {
                if byte >> i & 1 == 1 {
                    *w = one;
                }
            }
        }
        Lut(t)
    }
}

#[inline]
fn unpack_serial<W: SpikeWord>(src: &[u8], lut: &Lut<W>, dst: &mut [W]) {
    let full = dst.len() / 8;
    let mut chunks = dst.chunks_exact_mut(8);
    for (o, &b) in (&mut chunks).zip(src) {
        o.copy_from_slice(&lut.0[b as usize]);
    }
    let rest = chunks.into_remainder();
    if let Some(&b) = src.get(full) {
        for (o, &w) in rest.iter_mut().zip(lut.0[b as usize].iter()) {
            *o = w;
        }
    }
}
