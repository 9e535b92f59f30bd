//! Element chunks for the time loops: each task owns a contiguous range of neurons and walks
//! all time steps over it, so that its state stays in a small stack array and every access is a
//! contiguous run of one time row.

use crate::cpu_isa::CpuIsa;
use crate::kernels::par::PAR_THRESHOLD;
use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::Range;

/// Neurons per chunk. Each chunk keeps up to three f32 arrays of this length on the stack (96 KiB
/// in backward) that stay in L1/L2, and reads each time row in runs of 32 KiB, long enough for
/// the hardware prefetchers (measured: 2048 and 4096 were up to 1.5x slower, 16384 no faster).
pub(super) const CHUNK: usize = 8192;

/// PLIF partial-sum blocks per chunk (a chunk covers whole blocks, so every block lies in one
/// chunk).
pub(super) const BLOCKS_PER_CHUNK: usize = CHUNK / super::PLIF_PARTIAL_NEURONS;
const _: () = assert!(CHUNK.is_multiple_of(super::PLIF_PARTIAL_NEURONS));

/// Number of chunks for `n` neurons (depends only on the shape, never on the thread count).
pub(super) fn chunk_count(n: usize) -> usize {
    n.div_ceil(CHUNK)
}

fn chunk_range(c: usize, n: usize) -> Range<usize> {
    c * CHUNK..n.min((c + 1) * CHUNK)
}

/// Runs `f` on every chunk of `n` neurons, in parallel when `n * steps` is large enough. When
/// `partials` is given (`steps` slots per block of [`super::PLIF_PARTIAL_NEURONS`] neurons,
/// block-major), chunk `c` receives the rows of its own blocks, `steps` slots each, so that later
/// sums over the rows are independent of scheduling. `f` should be an `#[inline(always)]` closure, so that it is compiled into the
/// wide-vector variant of [`with_wide_vectors`].
pub(super) fn for_each_chunk(
    n: usize,
    steps: usize,
    partials: Option<&mut [f32]>,
    f: impl Fn(Range<usize>, Option<&mut [f32]>) + Sync + Send,
) {
    let f = |c: usize, row: Option<&mut [f32]>| {
        let r = chunk_range(c, n);
        with_wide_vectors(
            #[inline(always)]
            || f(r, row),
        )
    };
    let chunks = chunk_count(n);
    let parallel = chunks > 1 && n.saturating_mul(steps) >= PAR_THRESHOLD;
    match partials {
        Some(p) if steps > 0 => {
            debug_assert_eq!(p.len(), n.div_ceil(super::PLIF_PARTIAL_NEURONS) * steps);
            // The last chunk's rows are fewer when it holds fewer blocks.
            let rows = BLOCKS_PER_CHUNK * steps;
            if parallel {
                p.par_chunks_mut(rows)
                    .enumerate()
                    .for_each(|(c, row)| f(c, Some(row)));
            } else {
                p.chunks_mut(rows)
                    .enumerate()
                    .for_each(|(c, row)| f(c, Some(row)));
            }
        }
        _ => {
            if parallel {
                (0..chunks).into_par_iter().for_each(|c| f(c, None));
            } else {
                (0..chunks).for_each(|c| f(c, None));
            }
        }
    }
}

/// Runs `f` compiled for the widest vector path the kernels use ([`CpuIsa::selected`]):
/// AVX-512, AVX2 + FMA, or the baseline x86-64 target (SSE2). The results are bitwise identical:
/// the kernels use plain IEEE operations per lane, Rust never contracts a multiply and an add
/// into an FMA, and the explicit fused multiply-adds (`f32::mul_add`, in the sigmoid surrogate's
/// `exp`) round once in every build (an FMA instruction, or the correctly rounded libm `fmaf`
/// in the baseline).
#[inline(always)]
fn with_wide_vectors<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(test)]
    let isa = test_path().unwrap_or_else(CpuIsa::selected);
    #[cfg(not(test))]
    let isa = CpuIsa::selected();
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `selected` (and the tests' choice) only names paths the CPU has.
        CpuIsa::Avx512 => return unsafe { avx512(f) },
        // SAFETY: as above.
        CpuIsa::Avx2 => return unsafe { avx2_fma(f) },
        CpuIsa::Portable => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    f()
}

/// The path tests force (0: none, else 1 + the index in [`CpuIsa::ALL`]).
#[cfg(test)]
static TEST_PATH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Makes the kernels run path `isa` (an available one) until the next call; `None` restores
/// [`CpuIsa::selected`]. Every path gives the same bits, so other tests running meanwhile
/// are unaffected.
#[cfg(test)]
pub(super) fn force_test_path(isa: Option<CpuIsa>) {
    let v = isa.map_or(0, |isa| {
        assert!(isa.available(), "{isa} is not available on this CPU");
        1 + CpuIsa::ALL.iter().position(|&i| i == isa).unwrap_or(0) as u8
    });
    TEST_PATH.store(v, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
fn test_path() -> Option<CpuIsa> {
    match TEST_PATH.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        v => CpuIsa::ALL.get(usize::from(v) - 1).copied(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// An output buffer shared by the chunk tasks, each of which writes only its own neurons'
/// positions (`t * n + i` for `i` in its chunk) in every time row.
pub(super) struct SharedOut<'a> {
    ptr: *mut f32,
    len: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: `SharedOut` hands out `&mut` sub-slices only through the unsafe `slice`, whose contract
// makes concurrent slices disjoint; the buffer itself is exclusively borrowed for `'a`.
unsafe impl Send for SharedOut<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    /// Shares `buf` (exclusively borrowed for the tasks' lifetime).
    pub fn new(buf: &'a mut [f32]) -> Self {
        SharedOut {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _borrow: PhantomData,
        }
    }

    /// Elements `range` of the buffer (panics when out of bounds).
    ///
    /// # Safety
    /// No other live slice obtained from this `SharedOut`, on any thread, may overlap `range`.
    /// The chunk kernels guarantee it: a task only asks for ranges inside its own chunk of one
    /// time row, chunks are disjoint, and it drops each slice before asking for the next one.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, range: Range<usize>) -> &mut [f32] {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "SharedOut range out of bounds"
        );
        // SAFETY: in bounds (checked above) of a live exclusive borrow; disjointness is the
        // caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}
