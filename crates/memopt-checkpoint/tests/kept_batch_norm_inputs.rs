//! Kept BatchNorm inputs (`"batch_norm_inputs": "kept"`): a time-chunked segment's first
//! statistics pass keeps each chunk's input of its first training BatchNorm, and the pass giving
//! the outputs (and any later statistics pass) starts each chunk there instead of running the
//! layers before it again. Loss, gradients, running statistics, states and updated parameters
//! stay bit-identical to storing everything, Meta allocates what the CPU does, the skipped
//! layers allocate nothing in the later passes, and plans that cannot skip are refused up
//! front.

mod common;

use common::{entry, plan_of as plan, step_recorded};
use memopt_checkpoint::module::{BatchNorm, Conv2d, Init, Linear, Neuron, Sequential};
use memopt_checkpoint::{BatchNormInputs, ChunkBoundaries, InputSpec, Model, Plan, Policy, zoo};
use memopt_compress::CompressorKind;
use memopt_core::Device;
use memopt_core::kernels::{Conv2dParams, NeuronConfig};
use memopt_core::memory::{MemoryAction, Phase};

/// The VGG at T = 4 on 2x32x32 samples.
fn dvs_vgg(d: Device) -> Model {
    let mut spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
    spec.sample = vec![2, 32, 32];
    zoo::build("cifar10dvs-vgg", &spec, d, 1).unwrap()
}

const N: usize = 2;

fn chunked(chunks: usize, boundaries: ChunkBoundaries, inputs: BatchNormInputs) -> Policy {
    Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks,
        boundaries,
        batch_norm_inputs: inputs,
    }
}

/// Allocations of memory in the forward phase at exactly `path` in one Meta step under `p` (a
/// skipped layer's stand-in outputs take none).
fn forward_allocs(p: &Plan, path: &str) -> usize {
    let recorder = step_recorded(dvs_vgg, p, Device::META, N).1;
    let events = recorder.0.lock().unwrap();
    events
        .iter()
        .filter(|e| e.0 == MemoryAction::Alloc && e.1 > 0 && e.3 == path && e.4 == Phase::Forward)
        .count()
}

#[test]
fn kept_inputs_are_exact_and_the_later_pass_skips_the_layers_before_the_batch_norm() {
    for chunks in [2, 4] {
        for boundaries in [
            ChunkBoundaries::Kept,
            ChunkBoundaries::Replayed,
            ChunkBoundaries::KeptEvery(2),
        ] {
            let with = |inputs| {
                plan(vec![
                    // Block 1 and block 2's pool: its convolution runs before its BatchNorm.
                    entry("features", Some([1, 2]), 1, chunked(chunks, boundaries, inputs)),
                    // Block 2's convolution, BatchNorm and neuron, from pooled spikes.
                    entry("features.2", Some([1, 4]), 0, chunked(chunks, boundaries, inputs)),
                ])
            };
            let (kept, recomputed) = (with(BatchNormInputs::Kept), with(BatchNormInputs::Recomputed));
            common::assert_exact_and_meta_matches_cpu(dvs_vgg, &kept, N);
            // The statistics pass runs each chunk's convolution once; recomputed, the pass
            // giving the outputs runs it again.
            for conv in ["features.1.proj_bn.0", "features.2.proj_bn.1"] {
                let (k, r) = (forward_allocs(&kept, conv), forward_allocs(&recomputed, conv));
                assert!(k > 0, "{conv}: the statistics pass allocates");
                assert_eq!(
                    r,
                    2 * k,
                    "{conv}, {chunks} chunks, {boundaries:?}: one pass of two"
                );
            }
        }
    }
}

#[test]
fn a_segment_with_two_batch_norms_starts_every_later_pass_from_the_kept_inputs() {
    // Blocks 1 and 2 as one segment: two statistics passes and the pass giving the outputs,
    // the last two starting at block 1's BatchNorm.
    let with = |inputs| {
        plan(vec![entry(
            "features",
            Some([1, 3]),
            0,
            chunked(2, ChunkBoundaries::Kept, inputs),
        )])
    };
    let (kept, recomputed) = (with(BatchNormInputs::Kept), with(BatchNormInputs::Recomputed));
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &kept, N);
    let conv = "features.1.proj_bn.0";
    assert_eq!(forward_allocs(&recomputed, conv), 3 * forward_allocs(&kept, conv));
}

/// `seg` = `layers` on `[T, N, 2, 8, 8]`, then a linear head on the flattened output.
fn model_with(device: Device, neuron_first: bool, batch_norm: bool) -> Model {
    let mut init = Init::new(device, 3);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let mut seg = Sequential::new();
    if neuron_first {
        seg = seg.push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    }
    seg = seg.push(Conv2d::new(&mut init, 2, 4, 3, pad1, true).unwrap());
    if batch_norm {
        seg = seg.push(BatchNorm::new_2d(&mut init, 4).unwrap());
    }
    seg = seg.push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    let root = Sequential::new()
        .push_named("seg", seg)
        .push_named("flat", memopt_checkpoint::module::Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, 4 * 64, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 8, 8],
        classes: 5,
    };
    Model::new("kept-test", Box::new(root), spec, device)
}

#[test]
fn plans_that_cannot_keep_batch_norm_inputs_are_refused_and_leave_the_model_unchanged() {
    let kept = |chunks| chunked(chunks, ChunkBoundaries::Kept, BatchNormInputs::Kept);
    let cases: [(bool, bool, usize, &str); 3] = [
        (false, true, 1, "need time chunks"),
        (true, true, 2, "keeps a state across time steps"),
        (false, false, 2, "has no training BatchNorm"),
    ];
    for (neuron_first, batch_norm, chunks, why) in cases {
        let mut model = model_with(Device::Cpu, neuron_first, batch_norm);
        let before = model.plan().to_json();
        let bad = Plan::from_entries([("seg", kept(chunks))]);
        let msg = model.apply_plan(&bad).unwrap_err().to_string();
        assert!(msg.contains(why) && msg.contains("seg"), "{why}: {msg}");
        assert_eq!(model.plan().to_json(), before, "the model keeps its plan");
    }
    // The same segment without the neuron before its BatchNorm may keep them.
    let mut model = model_with(Device::Cpu, false, true);
    model.apply_plan(&Plan::from_entries([("seg", kept(2))])).unwrap();
    common::assert_exact_and_meta_matches_cpu(
        |d| model_with(d, false, true),
        &Plan::from_entries([("seg", kept(4))]),
        N,
    );
}

#[test]
fn plan_files_name_kept_batch_norm_inputs_and_omit_the_default() {
    let p = Plan::from_entries([(
        "features.1",
        chunked(2, ChunkBoundaries::Kept, BatchNormInputs::Kept),
    )]);
    let json = p.to_json();
    assert!(json.contains("\"batch_norm_inputs\": \"kept\""), "{json}");
    assert_eq!(Plan::from_json(&json).unwrap(), p);
    let default = Plan::from_entries([("features.1", Policy::checkpoint(CompressorKind::BitSpike, 2))]);
    assert!(!default.to_json().contains("batch_norm_inputs"));
    assert_eq!(
        chunked(2, ChunkBoundaries::Kept, BatchNormInputs::Kept).to_string(),
        "checkpoint(bit_spike, chunks=2, BatchNorm inputs kept)"
    );
}

#[test]
fn a_recomputed_entry_on_the_way_to_the_first_batch_norm_is_refused() {
    let kept = chunked(2, ChunkBoundaries::Kept, BatchNormInputs::Kept);
    // Block 1's convolution checkpointed on its own, inside block 1's segment keeping the
    // BatchNorm inputs: its later passes would skip that convolution.
    let nested = plan(vec![
        entry("features.1", None, 0, kept),
        entry("features.1.proj_bn.0", None, 0, Policy::CHECKPOINT),
    ]);
    let mut model = dvs_vgg(Device::Cpu);
    let msg = model.apply_plan(&nested).unwrap_err().to_string();
    assert!(
        msg.contains("'features.1' keeps its BatchNorm inputs")
            && msg.contains("'features.1.proj_bn.0' is recomputed"),
        "{msg}"
    );
    assert_eq!(model.plan(), Plan::store_all());
    // Block 1 checkpointed on its own inside a run keeping the BatchNorm inputs: its own
    // forward would run the run's first BatchNorm.
    let enclosing = plan(vec![
        entry("features", Some([1, 3]), 0, kept),
        entry("features.1", None, 0, Policy::CHECKPOINT),
    ]);
    let msg = model.apply_plan(&enclosing).unwrap_err().to_string();
    assert!(msg.contains("'features.1' is recomputed on the way"), "{msg}");
    // After the BatchNorm, a nested entry runs in every pass as usual.
    let after = plan(vec![
        entry("features.1", None, 0, kept),
        entry("features.1.neuron", None, 0, Policy::CHECKPOINT),
    ]);
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &after, N);
}
