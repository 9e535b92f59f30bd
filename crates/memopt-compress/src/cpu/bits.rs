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

/// Packs `src` into `dst` (`ceil(src.len()/8)` bytes) on this thread, with SIMD where the CPU
/// has it; returns whether a non-binary value was seen (only computed with `CHECK`).
fn pack_serial<W: SpikeWord, const CHECK: bool>(src: &[W], one: W, dst: &mut [u8]) -> bool {
    let (bad, done) = W::pack_simd::<CHECK>(src, one, dst);
    bad | pack_scalar::<W, CHECK>(&src[done..], one, &mut dst[done / 8..])
}

/// The portable loop of [`pack_serial`].
fn pack_scalar<W: SpikeWord, const CHECK: bool>(src: &[W], one: W, dst: &mut [u8]) -> bool {
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

/// Unpacks on this thread, with SIMD where the CPU has it.
fn unpack_serial<W: SpikeWord>(src: &[u8], lut: &Lut<W>, dst: &mut [W]) {
    let done = W::unpack_simd(src, lut.0[1][0], dst);
    unpack_scalar(&src[done..], lut, &mut dst[8 * done..]);
}

/// The portable loop of [`unpack_serial`].
fn unpack_scalar<W: SpikeWord>(src: &[u8], lut: &Lut<W>, dst: &mut [W]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pack_both<W: SpikeWord>(src: &[W], one: W) {
        let n = src.len().div_ceil(8);
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        assert_eq!(
            pack_serial::<W, true>(src, one, &mut a),
            pack_scalar::<W, true>(src, one, &mut b)
        );
        assert_eq!(a, b);
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        pack_serial::<W, false>(src, one, &mut a);
        pack_scalar::<W, false>(src, one, &mut b);
        assert_eq!(a, b);
        let lut = Lut::new(one);
        let (mut x, mut y) = (vec![W::ZERO; src.len()], vec![W::ZERO; src.len()]);
        unpack_serial(&a, &lut, &mut x);
        unpack_scalar(&a, &lut, &mut y);
        assert_eq!(x, y);
    }

    /// The AVX2 kernels directly (on AVX-512 machines the dispatcher prefers AVX-512, so
    /// they would otherwise only see tails).
    #[cfg(target_arch = "x86_64")]
    fn avx2_matches_scalar(w32: &[u32], w16: &[u16]) {
        use crate::cpu::simd;
        if !simd::has_avx2() {
            return eprintln!("no AVX2 on this CPU: AVX2 kernels not tested");
        }
        let n = w32.len().div_ceil(8);
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        // SAFETY: the CPU has AVX2 (checked above).
        let (bad, done) = unsafe { simd::pack_u32::<true>(w32, 0x3F80_0000, &mut a) };
        let bad = bad | pack_scalar::<u32, true>(&w32[done..], 0x3F80_0000, &mut a[done / 8..]);
        assert_eq!(bad, pack_scalar::<u32, true>(w32, 0x3F80_0000, &mut b));
        assert_eq!(a, b);
        let (mut c, mut d) = (vec![0u8; n], vec![0u8; n]);
        // SAFETY: as above.
        let (bad, done) = unsafe { simd::pack_u16::<true>(w16, 0x3C00, &mut c) };
        let bad = bad | pack_scalar::<u16, true>(&w16[done..], 0x3C00, &mut c[done / 8..]);
        assert_eq!(bad, pack_scalar::<u16, true>(w16, 0x3C00, &mut d));
        assert_eq!(c, d);
        let (lut32, lut16) = (Lut::new(0x3F80_0000u32), Lut::new(0x3C00u16));
        let (mut x, mut y) = (vec![0u32; w32.len()], vec![0u32; w32.len()]);
        // SAFETY: as above.
        let done = unsafe { simd::unpack_u32(&a, 0x3F80_0000, &mut x) };
        unpack_scalar(&a[done..], &lut32, &mut x[8 * done..]);
        unpack_scalar(&a, &lut32, &mut y);
        assert_eq!(x, y);
        let (mut x, mut y) = (vec![0u16; w16.len()], vec![0u16; w16.len()]);
        // SAFETY: as above.
        let done = unsafe { simd::unpack_u16(&c, 0x3C00, &mut x) };
        unpack_scalar(&c[done..], &lut16, &mut x[8 * done..]);
        unpack_scalar(&c, &lut16, &mut y);
        assert_eq!(x, y);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// The SIMD kernels (when the CPU has them) compute exactly what the scalar loops do,
        /// including the non-binary verdict, for f32 and 16-bit words, on any length.
        #[test]
        fn simd_matches_scalar(
            picks in proptest::collection::vec(0u8..8, 0..300),
            bad_at in proptest::option::of(0usize..300),
        ) {
            let f32s = [0.0f32, -0.0, 1.0, 1.0, 0.0, 0.5, f32::NAN, -1.0];
            let mut w32: Vec<u32> = picks.iter().map(|&p| f32s[(p % 5) as usize].to_bits()).collect();
            let mut w16: Vec<u16> = picks.iter().map(|&p| [0u16, 0x8000, 0x3C00, 0x3C00, 0][(p % 5) as usize]).collect();
            if let Some(i) = bad_at.filter(|&i| i < picks.len()) {
                w32[i] = f32s[5 + i % 3].to_bits();
                w16[i] = 0x3800;
            }
            pack_both(&w32, 0x3F80_0000u32);
            pack_both(&w16, 0x3C00u16);
            pack_both(&w16, 0x3F80u16);
            #[cfg(target_arch = "x86_64")]
            avx2_matches_scalar(&w32, &w16);
        }
    }
}
