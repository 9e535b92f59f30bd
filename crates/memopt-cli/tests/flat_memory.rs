//! A long run holds no more memory than a short one: `memopt train` on Meta for 100,000 steps
//! reaches the same heap peak as for 1,000 (issue 16: "nothing may grow per step"). The heap is
//! measured by a counting global allocator, so anything kept per step (tracker events, scope
//! strings, step times, losses) shows up.

use clap::Parser;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts the bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Heap bytes reached above the starting point by `memopt train` on Meta for `steps` steps.
fn heap_peak_of_train(steps: usize) -> usize {
    let steps = steps.to_string();
    let cli = memopt_cli::Cli::parse_from([
        "memopt",
        "train",
        "-m",
        "spiking-mlp",
        "--device",
        "meta",
        "--steps",
        &steps,
        "--quiet",
        "--json",
    ]);
    let mut out = Vec::with_capacity(1 << 16);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    memopt_cli::run(cli, &mut out).expect("train runs");
    PEAK.load(Ordering::Relaxed) - before
}

#[test]
fn a_long_meta_run_holds_no_more_than_a_short_one() {
    // Warm up thread-locals and lazily built tables, so both runs start alike.
    heap_peak_of_train(10);
    let short = heap_peak_of_train(1_000);
    let long = heap_peak_of_train(100_000);
    eprintln!("heap peak above the start: {short} bytes for 1,000 steps, {long} bytes for 100,000");
    // 64 bytes a step would be 6.3 MB more; allow a few KiB of noise (the JSON text).
    assert!(
        long <= short + 4096,
        "100,000 steps peaked at {long} heap bytes, 1,000 steps at {short}: {} bytes per extra step",
        (long - short) as f64 / 99_000.0
    );
}
