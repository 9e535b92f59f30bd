//! Plans are made for the step `memopt train` runs (`PLANNED_STEP`), which keeps no final neuron
//! state: the Meta estimate, the CPU step verification measures and the plan's peak are that
//! step's, while the states `verify_plan` compares come from one more step that keeps them,
//! whose peak holds the states on top (and equals a Meta step keeping them, to the byte).

use memopt_checkpoint::{Plan, PlanEntry, Policy, StepOptions};
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::{Estimator, PLANNED_STEP, StepRecord, Workload, verify_plan};

/// Blocks 1 (in 4 time chunks) and 3 of the CIFAR10-DVS VGG checkpointed.
fn checkpointed_blocks() -> Plan {
    let checkpoint = |path: &str, chunks| PlanEntry {
        path: path.into(),
        children: None,
        into_next: 0,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    };
    Plan {
        update_in_backward: false,
        entries: vec![checkpoint("features.1", 4), checkpoint("features.3", 1)],
        ..Plan::store_all()
    }
}

/// The peak of the first step of `workload` under `plan` on `device` keeping the final states,
/// the setup included (as [`StepRecord::first_step`] measures it).
fn peak_keeping_states(workload: &Workload, plan: &Plan, device: Device) -> u64 {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload.instantiate(device, plan).unwrap();
    session
        .step_with(StepOptions {
            keep_states: true,
            ..PLANNED_STEP
        })
        .unwrap();
    tracker.peak_bytes()
}

/// The CIFAR10-DVS VGG at its small T=4 (block 1 in four one-step chunks) and N=2, on 2x32x32
/// inputs instead of 2x48x48: 2.25 times less compute for the same blocks, neuron states and
/// chunks, with activations still on both sides of the allocator's 1 MiB small/large-pool
/// boundary.
fn dvs_vgg_32() -> Workload {
    let spec = memopt_checkpoint::zoo::entry("cifar10dvs-vgg").unwrap().small;
    Workload::zoo(
        "cifar10dvs-vgg",
        memopt_checkpoint::InputSpec {
            sample: vec![2, 32, 32],
            ..spec
        },
        2,
    )
}

/// The planned step of `plan` on the CIFAR10-DVS VGG ([`dvs_vgg_32`]): its CPU peak is the
/// estimate, its states come from one more step whose peak Meta reproduces and which holds at
/// most the states on top, and `verify_plan` passes. Returns the planned step's record.
fn check_plan(plan: &Plan) -> StepRecord {
    let workload = dvs_vgg_32();
    let planned = Estimator::new(&workload).unwrap().peak_bytes(plan).unwrap();
    let (record, _) = StepRecord::first_step(&workload, plan, Device::Cpu).unwrap();
    assert_eq!(record.peak_bytes, planned, "{plan:?}: the planned step's peak");
    assert!(!record.neuron_states.is_empty(), "{plan:?}: states compared");
    assert_eq!(
        record.peak_bytes_keeping_states,
        peak_keeping_states(&workload, plan, Device::META),
        "{plan:?}: Meta keeping the states allocates what the CPU does"
    );
    let state_bytes = state_bytes(&record);
    assert!(
        record.peak_bytes_keeping_states > record.peak_bytes
            && record.peak_bytes_keeping_states - record.peak_bytes <= state_bytes,
        "{plan:?}: {} keeping {state_bytes} bytes of states, {} not",
        record.peak_bytes_keeping_states,
        record.peak_bytes
    );
    let check = verify_plan(&workload, plan, Device::Cpu).unwrap();
    assert!(check.passed(), "{plan:?}: {}", check.summary());
    record
}

fn state_bytes(record: &StepRecord) -> u64 {
    record.neuron_states.iter().map(|(_, v)| 4 * v.len() as u64).sum()
}

// One test per plan, so that the test threads share the CPU steps.

#[test]
fn verification_measures_the_planned_step_and_compares_the_states_storing_everything() {
    let record = check_plan(&Plan::store_all());
    // Storing everything, the peak is at the start of backward, where every state is held.
    assert_eq!(
        record.peak_bytes_keeping_states - record.peak_bytes,
        state_bytes(&record)
    );
}

#[test]
fn verification_measures_the_planned_step_and_compares_the_states_under_checkpoints() {
    check_plan(&checkpointed_blocks());
}
