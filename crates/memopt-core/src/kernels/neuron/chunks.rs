//! Element chunks for the time loops: each task owns a contiguous range of neurons and walks
//! all time steps over it, so that its state stays in a small stack array and every access is a
//! contiguous run of one time row.

use crate::kernels::par::PAR_THRESHOLD;
use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::Range;

/// Neurons per chunk: the state of one chunk (4 bytes each) stays in L1, and the runs of each
/// time row are long enough for the hardware prefetchers.
pub(super) const CHUNK: usize = 2048;

/// Number of chunks for `n` neurons (depends only on the shape, never on the thread count).
pub(super) fn chunk_count(n: usize) -> usize {
    n.div_ceil(CHUNK)
}

fn chunk_range(c: usize, n: usize) -> Range<usize> {
    c * CHUNK..n.min((c + 1) * CHUNK)
}

/// Runs `f` on every chunk of `n` neurons, in parallel when `n * steps` is large enough. When
/// `partials` is given (one slot per chunk), the value `f` returns for chunk `c` goes to slot
/// `c`, so that a later sum over the slots is independent of scheduling.
pub(super) fn for_each_chunk(
    n: usize,
    steps: usize,
    partials: Option<&mut [f32]>,
    f: impl Fn(Range<usize>) -> f32 + Sync + Send,
) {
    let chunks = chunk_count(n);
    let parallel = chunks > 1 && n.saturating_mul(steps) >= PAR_THRESHOLD;
    match partials {
        Some(p) => {
            debug_assert_eq!(p.len(), chunks);
            if parallel {
                p.par_iter_mut()
                    .enumerate()
                    .for_each(|(c, slot)| *slot = f(chunk_range(c, n)));
            } else {
                p.iter_mut()
                    .enumerate()
                    .for_each(|(c, slot)| *slot = f(chunk_range(c, n)));
            }
        }
        None => {
            if parallel {
                (0..chunks).into_par_iter().for_each(|c| {
                    f(chunk_range(c, n));
                });
            } else {
                (0..chunks).for_each(|c| {
                    f(chunk_range(c, n));
                });
            }
        }
    }
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
