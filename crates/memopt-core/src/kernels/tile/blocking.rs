//! The blocking shared by the CPU's chain GEMMs (convolution, linear): block sizes, the
//! thread-local packed panel, the task split and the buffer tasks write concurrently. None of
//! it changes a result: every output element is one chain computed whole by one task.

use super::{MR, NR, Panels, Start, TileKernel};
use rayon::prelude::*;
use std::cell::RefCell;
use std::marker::PhantomData;

/// Inner indices per packed block (a tile's `b` operand, `KC x NR` f32 = 16 KiB, stays in L1).
pub(crate) const KC: usize = 256;
/// The most tile panels of rows a task walks as one group ([`TileKernel::panels_per_group`]).
pub(crate) const MC: usize = 16;
/// Columns per task's packed block (`KC x NC` f32 = 128 KiB, in L2).
pub(crate) const NC: usize = 8 * NR;
/// The blocks of at most `KC` that split `n` inner indices most evenly (`(blocks, size)`): a
/// short last block would pay a tile's fixed costs for little work.
pub(crate) fn even_blocks(n: usize) -> (usize, usize) {
    let blocks = n.div_ceil(KC).max(1);
    (blocks, n.div_ceil(blocks).max(1))
}

/// Multiply-adds below which a call runs on the calling thread.
pub(crate) const PAR_MIN_MACS: usize = 1 << 22;

thread_local! {
    /// The packed block of the task running on this thread (`KC * NC` f32, untracked like the
    /// `gemm` crate's packing buffers: a fixed 128 KiB per thread, never a function of shapes).
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's packed block.
pub(crate) fn with_panel<R>(f: impl FnOnce(&mut [f32]) -> R) -> R {
    PANEL.with_borrow_mut(|p| {
        if p.len() < KC * NC {
            p.resize(KC * NC, 0.0);
        }
        f(&mut p[..KC * NC])
    })
}

/// Values of [`with_rows`]' buffer: a group's broadcast rows, `MC * MR` rows of `KC` values.
const ROWS_LEN: usize = MC * MR * KC;

thread_local! {
    /// The broadcast rows a task gathers ([`ROWS_LEN`] f32 = 96 KiB, untracked like
    /// [`PANEL`]: fixed per thread, never a function of shapes).
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's buffer of gathered broadcast rows ([`ROWS_LEN`] values).
pub(crate) fn with_rows<R>(f: impl FnOnce(&mut [f32]) -> R) -> R {
    ROWS.with_borrow_mut(|p| {
        if p.len() < ROWS_LEN {
            p.resize(ROWS_LEN, 0.0);
        }
        f(&mut p[..ROWS_LEN])
    })
}

/// A buffer the tasks write concurrently, each only its own elements.
pub(crate) struct Shared<'a> {
    ptr: *mut f32,
    len: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: elements are only reached through the unsafe methods, whose contract makes
// concurrent accesses disjoint; the buffer is exclusively borrowed for `'a`.
unsafe impl Send for Shared<'_> {}
// SAFETY: as above.
unsafe impl Sync for Shared<'_> {}

impl<'a> Shared<'a> {
    pub(crate) fn new(buf: &'a mut [f32]) -> Self {
        Shared {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _borrow: PhantomData,
        }
    }

    /// Copies the `dst.len()` elements from `off` into `dst` (panics when out of bounds).
    ///
    /// # Safety
    /// No other task may write those elements during the call.
    pub(crate) unsafe fn read(&self, off: usize, dst: &mut [f32]) {
        assert!(off + dst.len() <= self.len, "shared buffer index out of bounds");
        // SAFETY: in bounds; no concurrent writer (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `src` to the elements from `off` (panics when out of bounds).
    ///
    /// # Safety
    /// No other task may read or write those elements during the call.
    pub(crate) unsafe fn write(&self, off: usize, src: &[f32]) {
        assert!(off + src.len() <= self.len, "shared buffer index out of bounds");
        // SAFETY: in bounds; exclusive (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// The tile whose row `r` is the `NR` elements at `off + r * ldc` (panics when it reaches
    /// past the end).
    ///
    /// # Safety
    /// No other task may access those elements while the pointer is used.
    pub(crate) unsafe fn tile(&self, off: usize, ldc: usize) -> *mut f32 {
        assert!(off + (MR - 1) * ldc + NR <= self.len, "shared tile out of bounds");
        // SAFETY: in bounds (asserted).
        unsafe { self.ptr.add(off) }
    }
}

/// Splits `items` into consecutive ranges so that `outer * ranges` tasks keep every thread
/// busy (the split never changes a result: each output is computed whole by one task).
pub(crate) fn row_groups(items: usize, outer: usize) -> Vec<(usize, usize)> {
    let want = (4 * rayon::current_num_threads()).div_ceil(outer.max(1));
    let groups = want.clamp(1, items.max(1));
    let per = items.div_ceil(groups).max(1);
    (0..items)
        .step_by(per)
        .map(|s| (s, (s + per).min(items)))
        .collect()
}

/// Runs `f` on every task, in parallel when the call has at least `macs` multiply-adds.
pub(crate) fn run_tasks<T: Sync>(tasks: &[T], macs: usize, f: impl Fn(&T) + Sync + Send) {
    if macs >= PAR_MIN_MACS && tasks.len() > 1 {
        tasks.par_iter().for_each(f);
    } else {
        tasks.iter().for_each(f);
    }
}

/// The rows of tile panel `panel` of a `rows`-row matrix (rows past the end repeat the last
/// one; their results are discarded).
pub(crate) fn panel_rows(panel: usize, rows: usize) -> [usize; MR] {
    std::array::from_fn(|r| (panel * MR + r).min(rows - 1))
}

/// Runs the `count` stacked tiles whose first row is at `off` of `out` (rows `ldc` apart)
/// over the column blocks `b` (one, or two side by side: the second `NR` columns to the right),
/// the rows of `a` (`lda` apart) as the broadcast operand and `starts` as in
/// [`TileKernel::run_panels`].
///
/// # Safety
/// The calling task alone accesses those tiles of `out` during the call (their bounds are
/// asserted), and `a` holds `count * MR` rows of `kc` values `lda` apart (asserted).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_owned_tiles(
    kernel: &TileKernel,
    kc: usize,
    (a, lda): (&[f32], usize),
    b: &[&[f32]],
    (out, off, ldc): (&Shared<'_>, usize, usize),
    count: usize,
    starts: impl Fn(usize) -> Start,
) {
    if count == 0 {
        return;
    }
    assert!(
        (1..=2).contains(&b.len()) && a.len() >= (count * MR - 1) * lda + kc,
        "owned tiles: operands shorter than the tiles"
    );
    // SAFETY: the tiles lie inside `out` (asserted by `Shared::tile`, the first and the last
    // row of the last block) and belong to this task (the caller's contract); the rows of `a`
    // lie inside it (asserted above).
    unsafe {
        let c = out.tile(off, ldc);
        out.tile(off + (count - 1) * MR * ldc + (b.len() - 1) * NR, ldc);
        let panels = Panels {
            a: a.as_ptr(),
            lda,
            c,
            ldc,
            count,
        };
        match b {
            [b0, b1] => kernel.run_panels_wide(kc, [b0, b1], panels, c.add(NR), starts),
            _ => kernel.run_panels(kc, b[0], panels, starts),
        }
    }
}
