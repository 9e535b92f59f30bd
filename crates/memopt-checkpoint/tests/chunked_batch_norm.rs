//! Checkpointed segments that contain training BatchNorm run in time chunks exactly: the
//! statistics and the output-gradient sums are computed in passes over the chunks, so the loss,
//! parameter and input gradients, BatchNorm running statistics, final neuron states and updated
//! parameters are bit-identical to storing everything, and Meta measures the CPU's bytes
//! (requested, allocated, reserved) exactly. Covers a bare BatchNorm, conv-BN-LIF blocks, the
//! VGG block (BN inside a nested Sequential), ResNet blocks with BN in the shortcut, Sequentials
//! of blocks, runs of children, and chunked segments nested in chunked segments.

mod common;

use common::{Recorder, batch, fingerprint, tiny_conv_snn, trainer, zoo_small};
use memopt_checkpoint::{ChunkBoundaries, InputSpec, Model, Plan, PlanEntry, Policy, StepOptions, zoo};
use memopt_compress::CompressorKind;
use memopt_core::{Device, MemoryTracker};
use std::sync::Arc;

fn chunked(chunks: usize) -> Policy {
    Policy::checkpoint(CompressorKind::BitSpike, chunks)
}

fn run(path: &str, children: [usize; 2], chunks: usize) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children: Some(children),
        into_next: 0,
        policy: chunked(chunks),
    }
}

fn plan(entries: Vec<PlanEntry>) -> Plan {
    let mut p = Plan::store_all();
    p.entries = entries;
    p
}

fn entry(path: &str, chunks: usize) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children: None,
        into_next: 0,
        policy: chunked(chunks),
    }
}

/// Two steps (so the running statistics of the first feed the second) under `plan` against
/// storing everything.
fn assert_exact(build: &dyn Fn(Device) -> Model, plan: &Plan, n: usize) {
    let baseline = fingerprint(&build(Device::Cpu), 2, n);
    let mut model = build(Device::Cpu);
    model.apply_plan(plan).unwrap();
    let got = fingerprint(&model, 2, n);
    assert!(
        !got.buffers.is_empty(),
        "the model has BatchNorm running statistics"
    );
    assert_eq!(got, baseline, "plan {}", plan.to_json());
}

/// (requested, allocated, reserved) peaks of one step on `device` under `plan`.
fn peaks(build: &dyn Fn(Device) -> Model, plan: &Plan, device: Device, n: usize) -> (u64, u64, u64) {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = build(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = trainer(&model);
    trainer
        .step(&model, &batch(&model, n, 0), StepOptions::default())
        .unwrap();
    (
        tracker.peak_bytes(),
        tracker.allocated_peak_bytes(),
        tracker.reserved_peak_bytes(),
    )
}

fn assert_meta_matches_cpu(build: &dyn Fn(Device) -> Model, plan: &Plan, n: usize) {
    let cpu = peaks(build, plan, Device::Cpu, n);
    let meta = peaks(build, plan, Device::META, n);
    assert_eq!(meta, cpu, "plan {}", plan.to_json());
}

fn tiny(d: Device) -> Model {
    tiny_conv_snn(d, 5, 4)
}

#[test]
fn conv_bn_lif_blocks_chunked() {
    // block1: conv-BN-LIF in 2 chunks; block2: conv-BN-PLIF in 4 (one step each).
    let p = plan(vec![entry("block1", 2), entry("block2", 4)]);
    assert_exact(&tiny, &p, 2);
    assert_meta_matches_cpu(&tiny, &p, 2);
}

#[test]
fn a_bare_batch_norm_chunked() {
    // The segment is the BatchNorm alone: its statistics pass runs nothing before it.
    let p = plan(vec![entry("block1.bn", 4), entry("block2.bn", 3)]);
    assert_exact(&tiny, &p, 3);
}

#[test]
fn several_batch_norms_in_one_chunked_segment_and_nested_segments() {
    // Both blocks (two BatchNorms, pooling between) as one run of root children in 2 chunks,
    // with block2 chunked again inside each chunk and block1.sn checkpointed inside.
    let p = plan(vec![
        run("", [0, 4], 2),
        entry("block2", 2),
        PlanEntry {
            path: "block1.sn".into(),
            children: None,
            into_next: 0,
            policy: Policy::CHECKPOINT,
        },
    ]);
    assert_exact(&tiny, &p, 2);
    assert_meta_matches_cpu(&tiny, &p, 2);
    // An unchunked checkpoint around a chunked one: the inner segment computes the statistics
    // while the outer recomputes in backward.
    let p = plan(vec![
        PlanEntry {
            path: "block1".into(),
            children: None,
            into_next: 0,
            policy: Policy::CHECKPOINT,
        },
        entry("block1.bn", 2),
    ]);
    assert_exact(&tiny, &p, 2);
}

/// The CIFAR10-DVS VGG at its small T=4 and N=2, on 2x32x32 inputs instead of 2x48x48 (2.25
/// times less compute): the same blocks, pools and chunk counts, and activations still on both
/// sides of the allocator's 1 MiB small/large-pool boundary (2-4 MiB whole, 0.5-1 MiB per time
/// step in the first blocks).
fn dvs_vgg(d: Device) -> Model {
    let spec = InputSpec {
        sample: vec![2, 32, 32],
        ..zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    zoo::build("cifar10dvs-vgg", &spec, d, 1).unwrap()
}

#[test]
fn cifar10dvs_vgg_blocks_chunked() {
    // VGGBlock = Sequential(conv, BN) + LIF; with average pooling first in features.2; a run of
    // two blocks; a block chunked inside a chunked block.
    let p = plan(vec![
        entry("features.0", 4),
        run("features", [1, 3], 2),
        entry("features.3", 2),
        entry("features.3.proj_bn", 2),
    ]);
    assert_exact(&dvs_vgg, &p, 2);
    assert_meta_matches_cpu(&dvs_vgg, &p, 2);
}

fn sew(d: Device) -> Model {
    zoo_small("sew-resnet18", d, 2)
}

fn spiking_resnet(d: Device) -> Model {
    zoo_small("spiking-resnet18", d, 3)
}

/// layer2.0 has a downsample (conv, BN) shortcut (and in SEW a neuron after it); layer1 is a
/// Sequential of two blocks; layer3 chunked whole, with its first block chunked inside.
fn resnet_plan() -> Plan {
    plan(vec![
        entry("layer1", 2),
        entry("layer2.0", 2),
        entry("layer3", 2),
        entry("layer3.0", 2),
    ])
}

// One test per ResNet, so that the test threads share them.

#[test]
fn sew_resnet_blocks_with_batch_norm_in_the_shortcut_chunked() {
    assert_exact(&sew, &resnet_plan(), 2);
    assert_meta_matches_cpu(&sew, &resnet_plan(), 2);
}

#[test]
fn spiking_resnet_blocks_with_batch_norm_in_the_shortcut_chunked() {
    assert_exact(&spiking_resnet, &resnet_plan(), 2);
    assert_meta_matches_cpu(&spiking_resnet, &resnet_plan(), 2);
}

fn vgg11(d: Device) -> Model {
    zoo_small("spiking-vgg11-bn", d, 4)
}

/// features = conv, BN, LIF, max pool, ...: runs across two conv-BN-LIF groups.
fn vgg11_runs() -> Plan {
    plan(vec![run("features", [0, 4], 2), run("features", [4, 11], 2)])
}

// The VGG-11's steps are the slowest here (129M parameters): its exactness and its peaks are
// two tests, so that the test threads share them.

#[test]
fn spiking_vgg11_runs_of_conv_bn_lif_chunked() {
    assert_exact(&vgg11, &vgg11_runs(), 2);
}

#[test]
fn spiking_vgg11_runs_of_conv_bn_lif_chunked_meta_matches_cpu() {
    assert_meta_matches_cpu(&vgg11, &vgg11_runs(), 2);
}

fn store_packed(path: &str) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children: None,
        into_next: 0,
        policy: Policy::StorePacked,
    }
}

#[test]
fn chunked_batch_norm_segments_compose_with_packed_reads_and_store_packed() {
    // block2's input (max-pooled spikes) is saved bit-packed, and its conv reads it one time
    // step at a time in every pass of the chunked segment (statistics, gradient sums,
    // backward); block1 stores its conv's input packed around its BatchNorm.
    let p = plan(vec![entry("block2", 2), store_packed("block1")]);
    assert_exact(&tiny, &p, 2);
    assert_meta_matches_cpu(&tiny, &p, 2);
    // store_packed inside a chunked run with two BatchNorms: the recomputation of each chunk
    // (in every pass) keeps block2's conv input packed.
    let p = plan(vec![run("", [0, 4], 2), store_packed("block2")]);
    assert_exact(&tiny, &p, 2);
    assert_meta_matches_cpu(&tiny, &p, 2);
}

#[test]
fn chunked_batch_norm_segments_compose_with_packed_reads_and_store_packed_on_the_vgg() {
    // The VGG: a chunked run of blocks whose input is spikes with store_packed on a block in
    // it, store_packed on a block after it, and a block chunked on its own.
    let p = plan(vec![
        run("features", [1, 3], 2),
        store_packed("features.1"),
        store_packed("features.3"),
        entry("features.4", 2),
    ]);
    assert_exact(&dvs_vgg, &p, 2);
    assert_meta_matches_cpu(&dvs_vgg, &p, 2);
}

fn replayed(entry: PlanEntry) -> PlanEntry {
    let Policy::Checkpoint {
        compressor, chunks, ..
    } = entry.policy
    else {
        return entry;
    };
    PlanEntry {
        policy: Policy::Checkpoint {
            compressor,
            chunks,
            boundaries: ChunkBoundaries::Replayed,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
        ..entry
    }
}

#[test]
fn replayed_boundaries_are_exact_and_meta_matches_cpu() {
    // Backward rebuilds each chunk's starting states by replaying the chunks before it, in
    // every pass (gradient sums of both BatchNorms, then the backward proper), also nested.
    for p in [
        plan(vec![replayed(entry("block1", 4)), replayed(entry("block2", 3))]),
        plan(vec![replayed(run("", [0, 4], 4)), replayed(entry("block2", 2))]),
        plan(vec![replayed(run("", [0, 4], 3)), entry("block1", 2)]),
    ] {
        assert_exact(&tiny, &p, 2);
        assert_meta_matches_cpu(&tiny, &p, 2);
    }
}

#[test]
fn replayed_boundaries_are_exact_and_meta_matches_cpu_on_the_vgg() {
    // The first block in 4 chunks; a run of three blocks (average pooling first in
    // features.2) in 3.
    let p = plan(vec![
        replayed(entry("features.0", 4)),
        replayed(run("features", [1, 3], 3)),
    ]);
    assert_exact(&dvs_vgg, &p, 2);
    assert_meta_matches_cpu(&dvs_vgg, &p, 2);
}

/// Bytes held when the step's backward starts under `plan`, on Meta.
fn held_at_backward(plan: &Plan) -> u64 {
    let tracker = MemoryTracker::new(Device::META);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = tiny(Device::META);
    model.apply_plan(plan).unwrap();
    let mut trainer = trainer(&model);
    let recorder = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    trainer
        .step(&model, &batch(&model, 2, 0), StepOptions::default())
        .unwrap();
    recorder.held_at_backward()
}

#[test]
fn replayed_boundaries_keep_no_chunk_boundary_state_through_the_forward() {
    // Blocks 1-2 (two LIF-like neurons) in k chunks keep one state of each neuron per boundary,
    // k - 1 of them, when kept; none when replayed.
    let model = tiny(Device::Cpu);
    let out = trainer(&model)
        .step(
            &model,
            &batch(&model, 2, 0),
            StepOptions {
                keep_states: true,
                ..StepOptions::default()
            },
        )
        .unwrap();
    let boundary: u64 = out
        .final_states
        .iter()
        .filter(|(p, _)| p.starts_with("block1.") || p.starts_with("block2."))
        .map(|(_, t)| t.view_bytes())
        .sum();
    assert!(boundary > 0, "blocks 1-2 hold neuron states");
    for k in [2, 3, 4] {
        let kept = held_at_backward(&plan(vec![run("", [0, 4], k)]));
        let replay = held_at_backward(&plan(vec![replayed(run("", [0, 4], k))]));
        assert_eq!(kept - replay, (k as u64 - 1) * boundary, "{k} chunks");
    }
}
