//! `verify_plan` on segments with training BatchNorm run in time chunks, on the zoo models at
//! small sizes: the measured CPU peak equals the planned (Meta) peak to the byte, and the loss,
//! gradients, BatchNorm running statistics, neuron states and updated parameters are
//! bit-identical to storing everything.

use memopt_checkpoint::{Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::Device;
use memopt_profiler::{Workload, verify_plan};

fn chunked(path: &str, children: Option<[usize; 2]>, chunks: usize) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children,
        into_next: 0,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    }
}

fn verify(model: &str, entries: Vec<PlanEntry>) {
    verify_step(model, entries, false);
}

fn verify_step(model: &str, entries: Vec<PlanEntry>, update_in_backward: bool) {
    let workload = Workload::zoo_small(model, 2).unwrap();
    let plan = Plan {
        entries,
        update_in_backward,
        ..Plan::store_all()
    };
    let check = verify_plan(&workload, &plan, Device::Cpu).unwrap();
    assert!(check.passed(), "{model}: {}", check.summary());
    assert!(!check.data_dependent, "{model}: the peak is exact");
}

#[test]
fn cifar10dvs_vgg_with_chunked_blocks_verifies() {
    verify(
        "cifar10dvs-vgg",
        vec![
            chunked("features.1", None, 4),
            chunked("features", Some([2, 4]), 2),
        ],
    );
}

#[test]
fn cifar10dvs_vgg_with_chunked_blocks_updating_in_backward_verifies() {
    // The peak is measured on a step keeping no gradient (each is freed in backward) and the
    // gradients compared come from the step keeping the states.
    verify_step(
        "cifar10dvs-vgg",
        vec![
            chunked("features.1", None, 4),
            chunked("features", Some([2, 4]), 2),
        ],
        true,
    );
}

#[test]
fn cifar10dvs_vgg_with_every_other_boundary_kept_verifies() {
    // Block 1 in 4 chunks keeping the states of chunks 0 and 2: backward replays chunk 0 for
    // chunk 1 and chunk 2 for chunk 3, in its gradient-sums pass and its backward.
    let mut alternate = chunked("features.1", None, 4);
    alternate.policy = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 4,
        boundaries: memopt_checkpoint::ChunkBoundaries::KeptEvery(2),
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    verify_step("cifar10dvs-vgg", vec![alternate], true);
}

#[test]
fn cifar10dvs_vgg_keeping_batch_norm_inputs_verifies() {
    // Block 1 with block 2's pool in 2 chunks keeping every other boundary state (the entry's
    // only) and its statistics pass's BatchNorm inputs, as the 4x plan's block 1 at N = 32
    // does in 5 chunks; and block 2's convolution, BatchNorm and neuron keeping theirs (its
    // output pass skips the convolution reading pooled spikes).
    let kept = |boundaries| Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 2,
        boundaries,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Kept,
    };
    let mut block1 = chunked("features", Some([1, 2]), 2);
    block1.into_next = 1;
    block1.policy = kept(memopt_checkpoint::ChunkBoundaries::KeptEvery(2));
    let mut blocks23 = chunked("features.2", Some([1, 4]), 2);
    blocks23.policy = kept(memopt_checkpoint::ChunkBoundaries::Kept);
    verify_step("cifar10dvs-vgg", vec![block1, blocks23], true);
}

// One test per ResNet, so that the test threads share them.

#[test]
fn sew_resnet_with_chunked_blocks_verifies() {
    verify(
        "sew-resnet18",
        vec![chunked("layer1", None, 2), chunked("layer2.0", None, 2)],
    );
}

#[test]
fn spiking_resnet_with_chunked_blocks_verifies() {
    verify(
        "spiking-resnet18",
        vec![chunked("layer1", None, 2), chunked("layer2.0", None, 2)],
    );
}

#[test]
fn spiking_vgg11_with_a_chunked_run_verifies() {
    verify("spiking-vgg11-bn", vec![chunked("features", Some([0, 7]), 2)]);
}
