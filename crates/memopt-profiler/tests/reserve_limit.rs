//! A reserve limit (the memory a device has for the process) makes the caching allocator
//! release its cached segments and retry before it fails, as PyTorch's does on a full device.
//! Meta replays the rule exactly: under the same limit, a step's requested, allocated and
//! reserved peaks on Meta equal the CPU's, and a step that does not fit fails on both.

use memopt_checkpoint::{Plan, Policy};
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::{Estimator, Workload};

/// One CPU step under `limit` (set after the setup, as the estimator does): the allocator's
/// three peaks, or the error.
fn cpu_step_within(workload: &Workload, plan: &Plan, limit: u64) -> Result<(u64, u64, u64), String> {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload
        .instantiate(Device::Cpu, plan)
        .map_err(|e| e.to_string())?;
    tracker.set_reserve_limit(Some(limit));
    tracker.empty_cache();
    tracker.reset_peak();
    session.step().map_err(|e| e.to_string())?;
    let s = tracker.stats();
    Ok((s.peak, s.allocated_peak, s.reserved_peak))
}

fn checkpointed_blocks() -> Plan {
    let bits = Policy::checkpoint(CompressorKind::BitSpike, 1);
    Plan::from_entries([("features.0", bits), ("features.2", bits), ("features.4", bits)])
}

#[test]
fn meta_and_cpu_release_the_cache_at_the_same_limit_and_fail_alike() {
    let workload = Workload::zoo(
        "cifar10dvs-vgg",
        memopt_checkpoint::zoo::entry("cifar10dvs-vgg")
            .unwrap()
            .small
            .clone(),
        2,
    );
    let plan = checkpointed_blocks();
    let mut estimator = Estimator::new(&workload).unwrap();
    let free = estimator.peaks(&plan).unwrap();
    assert!(
        free.allocated_bytes < free.reserved_bytes,
        "the plan must leave cached bytes to release"
    );
    // The least limit (in 2 MiB steps below the unbounded reserved peak) the step fits on Meta.
    let step = 2u64 << 20;
    let mut limit = free.reserved_bytes;
    let mut tightest = None;
    while limit > step {
        limit -= step;
        match estimator.peaks_within(&plan, limit).unwrap() {
            Some(levels) => tightest = Some((limit, levels)),
            None => break,
        }
    }
    let (fits, levels) = tightest.expect("some limit below the unbounded reserved peak fits");
    assert!(levels.reserved_bytes <= fits && levels.reserved_bytes < free.reserved_bytes);
    // Requested bytes never depend on the cache.
    assert_eq!(levels.requested_bytes, free.requested_bytes);
    let cpu = cpu_step_within(&workload, &plan, fits).unwrap();
    assert_eq!(
        cpu,
        (
            levels.requested_bytes,
            levels.allocated_bytes,
            levels.reserved_bytes
        ),
        "requested, allocated and reserved peaks under a limit of {fits} bytes"
    );
    // One step tighter fails on Meta (the search stopped there) and on the CPU, with the limit named.
    assert_eq!(estimator.peaks_within(&plan, limit).unwrap(), None);
    let err = cpu_step_within(&workload, &plan, limit).unwrap_err();
    assert!(err.contains(&format!("reserve limit of {limit} bytes")), "{err}");
    // The estimator is still exact after a failed step.
    assert_eq!(estimator.peaks(&plan).unwrap(), free);
}
