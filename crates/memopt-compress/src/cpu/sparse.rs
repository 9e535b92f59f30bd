//! Sparse on the CPU: the sorted row-major indices of the ones.
//!
//! Compression runs in two passes over fixed chunks of [`CHUNK`] values (so the work split
//! depends on the length only, never on the thread count): count the ones of each chunk (and
//! check the values), then write each chunk's indices at its prefix-sum offset.

use super::bits::non_binary;
use super::word::{SpikeElem, SpikeWord, is_bad};
use super::{CHUNK, PAR_THRESHOLD};
use crate::Result;
use memopt_core::CoreError;
use rayon::prelude::*;

/// Number of per-chunk counters [`count_ones`] needs for `len` values.
pub fn chunk_count(len: usize) -> usize {
    len.div_ceil(CHUNK)
}

/// Counts the values other than +-0 in each chunk of `CHUNK` values into `counts`
/// ([`chunk_count`] entries) and returns the total. With `check`, a value other than 0 and 1 is
/// an error naming the first one.
pub fn count_ones<E: SpikeElem>(src: &[E], check: bool, counts: &mut [i64]) -> Result<usize> {
    if counts.len() != chunk_count(src.len()) {
        return Err(CoreError::shape(
            "sparse count",
            format!("{} chunk counters", chunk_count(src.len())),
            counts.len(),
        )
        .into());
    }
    let words: &[E::Word] = bytemuck::cast_slice(src);
    let run = |s: &[E::Word], c: &mut i64| {
        let mut n = 0i64;
        let mut bad = false;
        for &w in s {
            n += !w.is_zero_value() as i64;
            bad |= check && is_bad(w, E::ONE);
        }
        *c = n;
        bad
    };
    let bad = if src.len() < PAR_THRESHOLD {
        words
            .chunks(CHUNK)
            .zip(counts.iter_mut())
            .fold(false, |acc, (s, c)| acc | run(s, c))
    } else {
        words
            .par_chunks(CHUNK)
            .zip(counts.par_iter_mut())
            .map(|(s, c)| run(s, c))
            .reduce(|| false, |a, b| a | b)
    };
    if bad {
        return Err(non_binary("sparse", src));
    }
    Ok(counts.iter().sum::<i64>() as usize)
}

/// Where [`fill_indices`] writes: u16 indices as little-endian byte pairs, or u32 indices.
#[derive(Debug)]
pub enum IndexBuf<'a> {
    /// Two bytes per index, little-endian (for at most 65,536 values).
    U16Le(&'a mut [u8]),
    /// One u32 per index.
    U32(&'a mut [u32]),
}

/// Writes the indices of the values other than +-0 into `dst`, given the per-chunk `counts`
/// from [`count_ones`] (turned into offsets in place). `dst` must hold exactly the total count.
pub fn fill_indices<E: SpikeElem>(src: &[E], counts: &mut [i64], dst: IndexBuf<'_>) -> Result<()> {
    const OP: &str = "sparse fill";
    let total: i64 = counts.iter().sum();
    let (len, width) = match &dst {
        IndexBuf::U16Le(b) => (b.len() / 2, 2),
        IndexBuf::U32(v) => (v.len(), 4),
    };
    if counts.len() != chunk_count(src.len()) || len as i64 != total {
        return Err(CoreError::invalid(
            OP,
            format!(
                "expected {} chunk counts summing to the {len} indices of the output",
                chunk_count(src.len())
            ),
        )
        .into());
    }
    if (width == 2 && src.len() > 1 << 16) || src.len() as u64 > 1 << 32 {
        return Err(CoreError::invalid(OP, "indices do not fit the index width").into());
    }
    let words: &[E::Word] = bytemuck::cast_slice(src);
    // Split the output at the chunk boundaries: chunk c owns counts[c] indices.
    match dst {
        IndexBuf::U16Le(bytes) => {
            let parts = split_by_counts(bytes, counts, 2);
            run_chunks(words, parts, |d, k, idx| {
                d[2 * k..2 * k + 2].copy_from_slice(&(idx as u16).to_le_bytes())
            });
        }
        IndexBuf::U32(v) => {
            let parts = split_by_counts(v, counts, 1);
            run_chunks(words, parts, |d, k, idx| d[k] = idx as u32);
        }
    }
    Ok(())
}

/// Splits `buf` into one part per chunk, `counts[c] * width` elements each.
fn split_by_counts<'a, T>(mut buf: &'a mut [T], counts: &[i64], width: usize) -> Vec<&'a mut [T]> {
    let mut parts = Vec::with_capacity(counts.len());
    for &c in counts {
        let (head, rest) = std::mem::take(&mut buf).split_at_mut(c as usize * width);
        parts.push(head);
        buf = rest;
    }
    parts
}

fn run_chunks<W: SpikeWord, T: Send>(
    words: &[W],
    parts: Vec<&mut [T]>,
    put: impl Fn(&mut [T], usize, usize) + Sync,
) {
    let run = |c: usize, s: &[W], d: &mut [T]| {
        let base = c * CHUNK;
        let mut k = 0;
        for (i, &w) in s.iter().enumerate() {
            if !w.is_zero_value() {
                put(d, k, base + i);
                k += 1;
            }
        }
    };
    if words.len() < PAR_THRESHOLD {
        for (c, (s, d)) in words.chunks(CHUNK).zip(parts).enumerate() {
            run(c, s, d);
        }
    } else {
        words
            .par_chunks(CHUNK)
            .zip(parts)
            .enumerate()
            .for_each(|(c, (s, d))| run(c, s, d));
    }
}

/// Writes 1.0 at every index of `indices` (sorted, each `< dst.len()`) into `dst`, which must
/// hold zeros. `get(k)` returns index `k` of `count`.
pub fn scatter_ones<E: SpikeElem>(count: usize, get: impl Fn(usize) -> usize + Sync, dst: &mut [E]) {
    let words: &mut [E::Word] = bytemuck::cast_slice_mut(dst);
    let run = |start: usize, d: &mut [E::Word]| {
        // Indices are sorted: find this chunk's range by binary search.
        let lo = partition_point(count, |k| get(k) < start);
        let hi = partition_point(count, |k| get(k) < start + d.len());
        for k in lo..hi {
            if let Some(w) = d.get_mut(get(k) - start) {
                *w = E::ONE;
            }
        }
    };
    if words.len() < PAR_THRESHOLD {
        run(0, words);
    } else {
        words
            .par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, d)| run(c * CHUNK, d));
    }
}

/// First `k` in `0..count` with `!pred(k)`, for a `pred` true on a prefix.
fn partition_point(count: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}
