//! Plans are made for the step `memopt train` runs (`PLANNED_STEP`), which keeps no final neuron
//! state: the Meta estimate, the CPU step verification measures and the plan's peak are that
//! step's, while the states `verify_plan` compares come from one more step that keeps them,
//! whose peak holds the states on top (and equals a Meta step keeping them, to the byte).

use memopt_checkpoint::{Plan, PlanEntry, Policy, StepOptions};
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::{Estimator, PLANNED_STEP, StepRecord, Workload, verify_plan};

fn plans() -> Vec<Plan> {
    let checkpoint = |path: &str, chunks| PlanEntry {
        path: path.into(),
        children: None,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    };
    vec![
        Plan::store_all(),
        Plan {
            entries: vec![checkpoint("features.1", 4), checkpoint("features.3", 1)],
            ..Plan::store_all()
        },
    ]
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

#[test]
fn verification_measures_the_planned_step_and_compares_the_states_of_one_that_keeps_them() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 2).unwrap();
    for plan in plans() {
        let planned = Estimator::new(&workload).unwrap().peak_bytes(&plan).unwrap();
        let (record, _) = StepRecord::first_step(&workload, &plan, Device::Cpu).unwrap();
        assert_eq!(record.peak_bytes, planned, "{plan:?}: the planned step's peak");
        assert!(!record.neuron_states.is_empty(), "{plan:?}: states compared");
        assert_eq!(
            record.peak_bytes_keeping_states,
            peak_keeping_states(&workload, &plan, Device::META),
            "{plan:?}: Meta keeping the states allocates what the CPU does"
        );
        let state_bytes: u64 = record.neuron_states.iter().map(|(_, v)| 4 * v.len() as u64).sum();
        assert!(
            record.peak_bytes_keeping_states > record.peak_bytes
                && record.peak_bytes_keeping_states - record.peak_bytes <= state_bytes,
            "{plan:?}: {} keeping {state_bytes} bytes of states, {} not",
            record.peak_bytes_keeping_states,
            record.peak_bytes
        );
        let check = verify_plan(&workload, &plan, Device::Cpu).unwrap();
        assert!(check.passed(), "{plan:?}: {}", check.summary());
    }
    // Storing everything, the peak is at the start of backward, where every state is held.
    let (record, _) = StepRecord::first_step(&workload, &Plan::store_all(), Device::Cpu).unwrap();
    let state_bytes: u64 = record.neuron_states.iter().map(|(_, v)| 4 * v.len() as u64).sum();
    assert_eq!(record.peak_bytes_keeping_states - record.peak_bytes, state_bytes);
}
