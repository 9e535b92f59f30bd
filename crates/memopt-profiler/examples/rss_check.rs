//! The reserved peak predicted on Meta against the real memory of the process: RSS growth over
//! one CPU training step of the CIFAR10-DVS VGG (48x48, storing everything), after a warm-up
//! step.
//!
//! `cargo run -p memopt-profiler --example rss_check --release [-- N T]` (default N=8, T=10)
//!
//! Method (Linux): build the model and batch on the CPU in a fresh tracker and run one warm-up
//! step (thread pools, lazily created state, code pages). Then empty the allocator's cache (its
//! free segments or pages go back to the system), reset the kernel's peak-RSS counter
//! (`echo 5 > /proc/self/clear_refs` resets `VmHWM` to the current RSS), read `VmRSS`, run one
//! step and read `VmHWM`. The growth `VmHWM - VmRSS(before)` is the most extra resident memory
//! the step needed. The prediction is the same sequence replayed on Meta: reserved peak during
//! the step minus reserved at its start. Host segments are pre-faulted anonymous mappings
//! (`MAP_POPULATE`), and so are the pages of expandable ranges (`MADV_POPULATE_WRITE`), so a
//! reserved byte is a resident byte; what the tracker does not see
//! (tape bookkeeping, GEMM packing buffers, thread stacks) is the difference.

use memopt_checkpoint::{InputSpec, Plan};
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::Workload;

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn status_bytes(field: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or(format!("no {field} in /proc/self/status"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .ok_or(format!("unreadable {field} line"))?
        .parse()?;
    Ok(kib * 1024)
}

/// (reserved at the start of the second step, reserved peak during it) on `device`, and the
/// RSS growth over that step when `rss` is set.
fn second_step(
    workload: &Workload,
    device: Device,
    rss: bool,
) -> Result<(u64, u64, Option<u64>), Box<dyn std::error::Error>> {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload.instantiate(device, &Plan::store_all())?;
    session.step()?;
    tracker.empty_cache();
    tracker.reset_peak();
    let start = tracker.reserved_bytes();
    let before = if rss {
        std::fs::write("/proc/self/clear_refs", "5")?;
        Some(status_bytes("VmRSS:")?)
    } else {
        None
    };
    session.step()?;
    let growth = match before {
        Some(b) => Some(status_bytes("VmHWM:")?.saturating_sub(b)),
        None => None,
    };
    Ok((start, tracker.reserved_peak_bytes(), growth))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(8), |s| s.parse())?;
    let t: usize = args.get(1).map_or(Ok(10), |s| s.parse())?;
    let spec = InputSpec {
        time_steps: t,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    let workload = Workload::zoo("cifar10dvs-vgg", spec, n);
    let (meta_start, meta_peak, _) = second_step(&workload, Device::META, false)?;
    let (cpu_start, cpu_peak, growth) = second_step(&workload, Device::Cpu, true)?;
    let predicted = meta_peak - meta_start;
    let growth = growth.unwrap_or(0);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("cifar10dvs-vgg N={n} T={t}, second step (after a warm-up step and empty_cache)");
    println!(
        "  predicted on Meta: reserved {:.1} MiB at the start, peak {:.1} MiB, growth {} bytes ({:.1} MiB)",
        mib(meta_start),
        mib(meta_peak),
        predicted,
        mib(predicted)
    );
    println!(
        "  CPU tracker:       reserved {:.1} MiB at the start, peak {:.1} MiB (equal to Meta: {})",
        mib(cpu_start),
        mib(cpu_peak),
        (cpu_start, cpu_peak) == (meta_start, meta_peak)
    );
    println!(
        "  process RSS growth (VmHWM - VmRSS before): {} bytes ({:.1} MiB) = {:.2}% of the prediction",
        growth,
        mib(growth),
        100.0 * growth as f64 / predicted.max(1) as f64
    );
    Ok(())
}
