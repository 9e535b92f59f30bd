//! Raw-bit views of the float dtypes binary compressors accept.

use half::{bf16, f16};
use memopt_core::Element;
use rayon::prelude::*;

/// The unsigned integer holding the bits of a float element.
pub trait SpikeWord: Copy + Send + Sync + Eq + bytemuck::Pod + std::fmt::Debug + 'static {
    /// All bits clear.
    const ZERO: Self;
    /// Whether the value is +0.0 or -0.0 (magnitude bits clear).
    fn is_zero_value(self) -> bool;
    /// Packs a prefix of `src` into `dst` with SIMD when the CPU allows; returns whether a
    /// non-binary value was seen (with `CHECK`) and the values consumed (a multiple of 8).
    fn pack_simd<const CHECK: bool>(src: &[Self], one: Self, dst: &mut [u8]) -> (bool, usize) {
        let _ = (src, one, dst);
        (false, 0)
    }
    /// Unpacks a prefix of `src` with SIMD when the CPU allows; returns the bytes consumed.
    fn unpack_simd(src: &[u8], one: Self, dst: &mut [Self]) -> usize {
        let _ = (src, one, dst);
        0
    }
}

impl SpikeWord for u32 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn is_zero_value(self) -> bool {
        self & 0x7FFF_FFFF == 0
    }
    #[cfg(target_arch = "x86_64")]
    fn pack_simd<const CHECK: bool>(src: &[Self], one: Self, dst: &mut [u8]) -> (bool, usize) {
        if super::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked above).
            let (bad, done) = unsafe { super::simd::pack_u32_512::<CHECK>(src, one, dst) };
            // SAFETY: as above; AVX-512 implies AVX2. The AVX2 kernel packs what is left.
            let (bad2, done2) =
                unsafe { super::simd::pack_u32::<CHECK>(&src[done..], one, &mut dst[done / 8..]) };
            return (bad | bad2, done + done2);
        }
        if super::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { super::simd::pack_u32::<CHECK>(src, one, dst) };
        }
        (false, 0)
    }
    #[cfg(target_arch = "x86_64")]
    fn unpack_simd(src: &[u8], one: Self, dst: &mut [Self]) -> usize {
        if super::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked above).
            return unsafe { super::simd::unpack_u32_512(src, one, dst) };
        }
        if super::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { super::simd::unpack_u32(src, one, dst) };
        }
        0
    }
}

impl SpikeWord for u16 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn is_zero_value(self) -> bool {
        self & 0x7FFF == 0
    }
    #[cfg(target_arch = "x86_64")]
    fn pack_simd<const CHECK: bool>(src: &[Self], one: Self, dst: &mut [u8]) -> (bool, usize) {
        if super::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked above).
            let (bad, done) = unsafe { super::simd::pack_u16_512::<CHECK>(src, one, dst) };
            // SAFETY: as above; AVX-512 implies AVX2. The AVX2 kernel packs what is left.
            let (bad2, done2) =
                unsafe { super::simd::pack_u16::<CHECK>(&src[done..], one, &mut dst[done / 8..]) };
            return (bad | bad2, done + done2);
        }
        if super::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { super::simd::pack_u16::<CHECK>(src, one, dst) };
        }
        (false, 0)
    }
    #[cfg(target_arch = "x86_64")]
    fn unpack_simd(src: &[u8], one: Self, dst: &mut [Self]) -> usize {
        if super::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW (checked above).
            return unsafe { super::simd::unpack_u16_512(src, one, dst) };
        }
        if super::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { super::simd::unpack_u16(src, one, dst) };
        }
        0
    }
}

/// A float element type binary compressors accept: f32, f16 or bf16.
pub trait SpikeElem: Element + bytemuck::Pod {
    /// Its bits.
    type Word: SpikeWord;
    /// The bits of 1.0.
    const ONE: Self::Word;
    /// The value as f64 (for error messages).
    fn value_f64(self) -> f64;
}

impl SpikeElem for f32 {
    type Word = u32;
    const ONE: u32 = 0x3F80_0000;
    fn value_f64(self) -> f64 {
        self as f64
    }
}

impl SpikeElem for f16 {
    type Word = u16;
    const ONE: u16 = 0x3C00;
    fn value_f64(self) -> f64 {
        self.to_f64()
    }
}

impl SpikeElem for bf16 {
    type Word = u16;
    const ONE: u16 = 0x3F80;
    fn value_f64(self) -> f64 {
        self.to_f64()
    }
}

/// Whether `w` is the bits of a value other than 0 and 1.
#[inline(always)]
pub(crate) fn is_bad<W: SpikeWord>(w: W, one: W) -> bool {
    !w.is_zero_value() & (w != one)
}

/// Row-major index of the first element that is neither 0 nor 1, if any.
pub fn first_non_binary<E: SpikeElem>(values: &[E]) -> Option<usize> {
    let words: &[E::Word] = bytemuck::cast_slice(values);
    if words.len() < super::PAR_THRESHOLD {
        words.iter().position(|&w| is_bad(w, E::ONE))
    } else {
        words.par_iter().position_first(|&w| is_bad(w, E::ONE))
    }
}
