//! A training step keeps each neuron's final membrane state only when the caller asks for it
//! (`StepOptions::keep_states`): otherwise the state is released as soon as nothing can read it
//! (after the neuron runs; in a time-chunked segment, after its last chunk), so the step's peak
//! no longer holds it. The peak drops by exactly the states' bytes, Meta allocates what the CPU
//! does, and gradients, statistics and updated parameters are bit-identical.

mod common;

use common::{Recorded, Recorder, fingerprint_with, tiny_conv_snn};
use memopt_checkpoint::{InputSpec, Model, Plan, PlanEntry, Policy, StepOptions, zoo};
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryTracker};
use std::sync::Arc;

/// What one step measured: its requested peak (a fresh tracker's, model and batch included),
/// its events, and the bytes of the final states it returned.
struct Stepped {
    peak: u64,
    events: Vec<Recorded>,
    state_bytes: u64,
    states: usize,
}

fn step(build: &dyn Fn(Device) -> Model, plan: &Plan, device: Device, keep_states: bool) -> Stepped {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = build(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = common::trainer(&model);
    let batch = common::batch(&model, 2, 0);
    let recorder = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    let opts = StepOptions {
        keep_states,
        ..StepOptions::default()
    };
    let out = trainer.step(&model, &batch, opts).unwrap();
    let state_bytes = out.final_states.iter().map(|(_, t)| t.view_bytes()).sum();
    let events = recorder.0.lock().unwrap().clone();
    Stepped {
        peak: tracker.peak_bytes(),
        events,
        state_bytes,
        states: out.final_states.len(),
    }
}

fn checkpoint(path: &str, children: Option<[usize; 2]>, chunks: usize) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children,
        into_next: 0,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    }
}

fn plan(entries: Vec<PlanEntry>) -> Plan {
    Plan {
        entries,
        ..Plan::store_all()
    }
}

/// The plans of every test: storing everything, checkpoints, a time-chunked segment with
/// training BatchNorms, chunked segments nested in a chunked run, and packed stores.
fn plans() -> Vec<(&'static str, Plan)> {
    vec![
        ("store all", Plan::store_all()),
        (
            "checkpoint blocks",
            plan(vec![checkpoint("block1", None, 1), checkpoint("block2", None, 1)]),
        ),
        (
            "chunked blocks",
            plan(vec![checkpoint("block1", None, 2), checkpoint("head", None, 4)]),
        ),
        (
            "nested chunks",
            plan(vec![
                checkpoint("", Some([0, 4]), 2),
                checkpoint("block1", None, 2),
                checkpoint("block2.conv", None, 2),
            ]),
        ),
        (
            "packed stores",
            plan(vec![
                PlanEntry {
                    path: "block2".into(),
                    children: None,
                    into_next: 0,
                    policy: Policy::StorePacked,
                },
                checkpoint("head", None, 2),
            ]),
        ),
    ]
}

fn tiny(device: Device) -> Model {
    tiny_conv_snn(device, 3, 4)
}

/// Storing everything, the peak is at the start of backward, where every neuron has run: a
/// step that keeps the states holds all of them there, one that does not holds none, so the
/// peaks differ by exactly the states' bytes, on the CPU and on Meta alike.
#[test]
fn without_the_states_the_peak_drops_by_exactly_their_bytes() {
    // The CIFAR10-DVS VGG at its small T=4 on 2x32x32 inputs instead of 2x48x48 (2.25 times
    // less compute): the same eight neurons' states.
    let spec = InputSpec {
        sample: vec![2, 32, 32],
        ..zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    let vgg = |device: Device| zoo::build("cifar10dvs-vgg", &spec, device, 2).unwrap();
    let models: [(&str, &dyn Fn(Device) -> Model); 2] = [("tiny-conv-snn", &tiny), ("cifar10dvs-vgg", &vgg)];
    for (name, build) in models {
        let mut peaks = Vec::new();
        for device in [Device::Cpu, Device::META] {
            let kept = step(build, &Plan::store_all(), device, true);
            let released = step(build, &Plan::store_all(), device, false);
            assert!(kept.states > 0 && kept.state_bytes > 0, "{name}: no states");
            assert_eq!(
                released.states, 0,
                "{name}: states returned without being asked for"
            );
            assert_eq!(
                kept.peak - released.peak,
                kept.state_bytes,
                "{name} on {device}: kept {} released {}",
                kept.peak,
                released.peak
            );
            peaks.push((kept.peak, released.peak));
        }
        assert_eq!(peaks[0], peaks[1], "{name}: Meta's peaks are the CPU's");
    }
}

/// Under every plan, releasing the states never raises the peak, and keeping them gives the
/// peak the step had before states could be released: the states' bytes at most above it.
#[test]
fn releasing_the_states_lowers_every_plans_peak_by_at_most_their_bytes() {
    for (name, plan) in plans() {
        let kept = step(&tiny, &plan, Device::Cpu, true);
        let released = step(&tiny, &plan, Device::Cpu, false);
        assert!(
            released.peak < kept.peak && kept.peak - released.peak <= kept.state_bytes,
            "{name}: kept {} released {} states {}",
            kept.peak,
            released.peak,
            kept.state_bytes
        );
    }
}

/// Meta allocates and frees what the CPU does, event for event, with and without the states
/// (which are released by handles and options only, never by data).
#[test]
fn meta_allocates_what_the_cpu_does_with_and_without_the_states() {
    for (name, plan) in plans() {
        for keep in [false, true] {
            let cpu = step(&tiny, &plan, Device::Cpu, keep);
            let meta = step(&tiny, &plan, Device::META, keep);
            assert_eq!(cpu.events, meta.events, "{name}, keep_states {keep}");
            assert_eq!(cpu.peak, meta.peak, "{name}, keep_states {keep}");
        }
    }
}

/// Gradients, input gradients, the loss, BatchNorm running statistics and the updated
/// parameters are bit-identical whether or not the states are kept, under every plan (two
/// steps, so the second starts from the first's update and running statistics).
#[test]
fn the_step_is_bit_identical_with_and_without_the_states() {
    for (name, plan) in plans() {
        let fingerprint = |keep| {
            let mut model = tiny(Device::Cpu);
            model.apply_plan(&plan).unwrap();
            fingerprint_with(&model, 2, 2, keep)
        };
        let kept = fingerprint(true);
        assert!(!kept.states.is_empty(), "{name}");
        assert_eq!(fingerprint(false), kept.without_states(), "{name}");
    }
}
