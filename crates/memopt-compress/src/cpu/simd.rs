//! AVX2 versions of the bit kernels (x86_64, chosen at run time when the CPU has AVX2). They
//! compute exactly what the scalar loops in `bits.rs` compute; the tests compare both.

use std::arch::x86_64::*;

/// Whether this CPU runs the AVX2 kernels (detected once, then a cached load).
#[inline]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Packs 32 f32 bit patterns per step into 4 bytes; returns whether a value other than 0 and 1
/// was seen (with `CHECK`) and how many values were consumed (a multiple of 32).
#[target_feature(enable = "avx2")]
pub(crate) fn pack_u32<const CHECK: bool>(src: &[u32], one: u32, dst: &mut [u8]) -> (bool, usize) {
    let abs = _mm256_set1_epi32(0x7FFF_FFFF);
    let onev = _mm256_set1_epi32(one as i32);
    let zero = _mm256_setzero_si256();
    let mut ok = _mm256_set1_epi32(-1);
    let steps = (src.len() / 32).min(dst.len() / 4);
    for (c, o) in src.chunks_exact(32).zip(dst.chunks_exact_mut(4)).take(steps) {
        let mut word = 0u32;
        for k in 0..4 {
            // SAFETY: `c` holds 32 u32, so 8 of them start at 8k for k < 4; loadu has no
            // alignment requirement.
            let v = unsafe { _mm256_loadu_si256(c.as_ptr().add(8 * k).cast()) };
            let z = _mm256_cmpeq_epi32(_mm256_and_si256(v, abs), zero);
            let zbits = _mm256_movemask_ps(_mm256_castsi256_ps(z)) as u32;
            word |= (!zbits & 0xFF) << (8 * k);
            if CHECK {
                ok = _mm256_and_si256(ok, _mm256_or_si256(z, _mm256_cmpeq_epi32(v, onev)));
            }
        }
        o.copy_from_slice(&word.to_le_bytes());
    }
    let bad = CHECK && _mm256_movemask_epi8(ok) != -1;
    (bad, steps * 32)
}

/// Packs 32 f16/bf16 bit patterns per step into 4 bytes; as [`pack_u32`].
#[target_feature(enable = "avx2")]
pub(crate) fn pack_u16<const CHECK: bool>(src: &[u16], one: u16, dst: &mut [u8]) -> (bool, usize) {
    let abs = _mm256_set1_epi16(0x7FFF);
    let onev = _mm256_set1_epi16(one as i16);
    let zero = _mm256_setzero_si256();
    let mut ok = _mm256_set1_epi16(-1);
    let steps = (src.len() / 32).min(dst.len() / 4);
    for (c, o) in src.chunks_exact(32).zip(dst.chunks_exact_mut(4)).take(steps) {
        // SAFETY: `c` holds 32 u16: two loads of 16 at 0 and 16.
        let a = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
        let b = unsafe { _mm256_loadu_si256(c.as_ptr().add(16).cast()) };
        let za = _mm256_cmpeq_epi16(_mm256_and_si256(a, abs), zero);
        let zb = _mm256_cmpeq_epi16(_mm256_and_si256(b, abs), zero);
        // packs interleaves 128-bit lanes: [a0-7 b0-7 | a8-15 b8-15]; the permute restores order.
        let z = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi16(za, zb));
        let word = !(_mm256_movemask_epi8(z) as u32);
        o.copy_from_slice(&word.to_le_bytes());
        if CHECK {
            ok = _mm256_and_si256(ok, _mm256_or_si256(za, _mm256_cmpeq_epi16(a, onev)));
            ok = _mm256_and_si256(ok, _mm256_or_si256(zb, _mm256_cmpeq_epi16(b, onev)));
        }
    }
    let bad = CHECK && _mm256_movemask_epi8(ok) != -1;
    (bad, steps * 32)
}

/// Unpacks whole bytes into 8 f32 bit patterns each (`one` or 0); returns the bytes consumed.
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_u32(src: &[u8], one: u32, dst: &mut [u32]) -> usize {
    let sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let onev = _mm256_set1_epi32(one as i32);
    let steps = src.len().min(dst.len() / 8);
    for (&b, o) in src.iter().zip(dst.chunks_exact_mut(8)).take(steps) {
        let m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(b as i32), sel), sel);
        // SAFETY: `o` holds 8 u32 = 32 bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), _mm256_and_si256(m, onev)) };
    }
    steps
}

/// Unpacks pairs of bytes into 16 f16/bf16 bit patterns (`one` or 0); returns the bytes
/// consumed (even).
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_u16(src: &[u8], one: u16, dst: &mut [u16]) -> usize {
    let sel = _mm256_setr_epi16(
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        0x100,
        0x200,
        0x400,
        0x800,
        0x1000,
        0x2000,
        0x4000,
        i16::MIN,
    );
    let onev = _mm256_set1_epi16(one as i16);
    let steps = (src.len() / 2).min(dst.len() / 16);
    for (b, o) in src.chunks_exact(2).zip(dst.chunks_exact_mut(16)).take(steps) {
        let pair = u16::from_le_bytes([b[0], b[1]]) as i16;
        let m = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(pair), sel), sel);
        // SAFETY: `o` holds 16 u16 = 32 bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), _mm256_and_si256(m, onev)) };
    }
    2 * steps
}

/// Whether this CPU runs the AVX-512 kernels (AVX-512F and BW).
#[inline]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
}

/// AVX-512 version of [`pack_u32`]: 64 values (two 16-lane tests) per 8 output bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn pack_u32_512<const CHECK: bool>(src: &[u32], one: u32, dst: &mut [u8]) -> (bool, usize) {
    let abs = _mm512_set1_epi32(0x7FFF_FFFF);
    let onev = _mm512_set1_epi32(one as i32);
    let mut bad: u16 = 0;
    let steps = (src.len() / 64).min(dst.len() / 8);
    for (c, o) in src.chunks_exact(64).zip(dst.chunks_exact_mut(8)).take(steps) {
        let mut word = 0u64;
        for k in 0..4 {
            // SAFETY: `c` holds 64 u32, so 16 of them start at 16k for k < 4; loadu has no
            // alignment requirement.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().add(16 * k).cast()) };
            let nz = _mm512_test_epi32_mask(v, abs);
            word |= (nz as u64) << (16 * k);
            if CHECK {
                bad |= nz & _mm512_cmpneq_epi32_mask(v, onev);
            }
        }
        o.copy_from_slice(&word.to_le_bytes());
    }
    (bad != 0, steps * 64)
}

/// AVX-512 version of [`pack_u16`]: 64 values (two 32-lane tests) per 8 output bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn pack_u16_512<const CHECK: bool>(src: &[u16], one: u16, dst: &mut [u8]) -> (bool, usize) {
    let abs = _mm512_set1_epi16(0x7FFF);
    let onev = _mm512_set1_epi16(one as i16);
    let mut bad: u32 = 0;
    let steps = (src.len() / 64).min(dst.len() / 8);
    for (c, o) in src.chunks_exact(64).zip(dst.chunks_exact_mut(8)).take(steps) {
        // SAFETY: `c` holds 64 u16: two loads of 32 at 0 and 32.
        let a = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
        let b = unsafe { _mm512_loadu_si512(c.as_ptr().add(32).cast()) };
        let (na, nb) = (_mm512_test_epi16_mask(a, abs), _mm512_test_epi16_mask(b, abs));
        let word = na as u64 | (nb as u64) << 32;
        o.copy_from_slice(&word.to_le_bytes());
        if CHECK {
            bad |= na & _mm512_cmpneq_epi16_mask(a, onev);
            bad |= nb & _mm512_cmpneq_epi16_mask(b, onev);
        }
    }
    (bad != 0, steps * 64)
}

/// AVX-512 version of [`unpack_u32`]: 2 bytes (16 values) per store.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn unpack_u32_512(src: &[u8], one: u32, dst: &mut [u32]) -> usize {
    let onev = _mm512_set1_epi32(one as i32);
    let steps = (src.len() / 2).min(dst.len() / 16);
    for (b, o) in src.chunks_exact(2).zip(dst.chunks_exact_mut(16)).take(steps) {
        let m = u16::from_le_bytes([b[0], b[1]]);
        // SAFETY: `o` holds 16 u32 = 64 bytes; storeu has no alignment requirement.
        unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), _mm512_maskz_mov_epi32(m, onev)) };
    }
    2 * steps
}

/// AVX-512 version of [`unpack_u16`]: 4 bytes (32 values) per store.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn unpack_u16_512(src: &[u8], one: u16, dst: &mut [u16]) -> usize {
    let onev = _mm512_set1_epi16(one as i16);
    let steps = (src.len() / 4).min(dst.len() / 32);
    for (b, o) in src.chunks_exact(4).zip(dst.chunks_exact_mut(32)).take(steps) {
        let m = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        // SAFETY: `o` holds 32 u16 = 64 bytes; storeu has no alignment requirement.
        unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), _mm512_maskz_mov_epi16(m, onev)) };
    }
    4 * steps
}
