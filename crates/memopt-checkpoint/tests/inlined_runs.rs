//! Runs of links through an inlined child: the VGG block's chain inlines `proj_bn`, so a run
//! can hold the block's BatchNorm and its neuron without the convolution. Such a segment keeps
//! only the convolution's output for backward (the neuron's membrane sequence is recomputed),
//! runs exactly (loss, gradients, running statistics, states and updated parameters
//! bit-identical to storing everything; Meta's peaks equal the CPU's), composes with time
//! chunks, replayed boundaries and policies inside, and a plan that would bypass a policy of
//! the inlined child is rejected with the reason.

mod common;

use common::{entry, plan_of as plan, step_recorded, zoo_small};
use memopt_checkpoint::{ChunkBoundaries, Model, Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::Device;

fn dvs_vgg(d: Device) -> Model {
    zoo_small("cifar10dvs-vgg", d, 1)
}

fn run(path: &str, children: [usize; 2], policy: Policy) -> PlanEntry {
    entry(path, Some(children), 0, policy)
}

fn module(path: &str, policy: Policy) -> PlanEntry {
    entry(path, None, 0, policy)
}

/// Blocks of the VGG whose `proj_bn` starts with an average pool (one more link before the
/// convolution).
const POOLED: [usize; 3] = [2, 4, 6];

/// The link of block `b`'s BatchNorm in the block's chain (`proj_bn.1`, or `proj_bn.2` after a
/// pool); the neuron is the next link.
fn bn_link(b: usize) -> usize {
    if POOLED.contains(&b) { 2 } else { 1 }
}

/// (requested, allocated, reserved) peaks of one step under `plan` on `device`, and the bytes
/// held when its backward starts.
fn step_figures(plan: &Plan, device: Device, n: usize) -> ((u64, u64, u64), u64) {
    let (peaks, recorder) = step_recorded(dvs_vgg, plan, device, n);
    (peaks, recorder.held_at_backward())
}

fn assert_exact_and_meta_matches_cpu(p: &Plan, n: usize) {
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, p, n);
}

#[test]
fn a_run_of_batch_norm_and_neuron_keeps_only_the_convolution_output() {
    let n = 1;
    // Every block's BatchNorm checkpointed alone keeps the convolution's output; its neuron,
    // stored, keeps its membrane sequence. The run of the two keeps the convolution's output
    // alone.
    let alone = plan(
        (0..8)
            .map(|b| {
                module(
                    &format!("features.{b}.proj_bn.{}", bn_link(b)),
                    Policy::CHECKPOINT,
                )
            })
            .collect(),
    );
    let runs = plan(
        (0..8)
            .map(|b| {
                run(
                    &format!("features.{b}"),
                    [bn_link(b), bn_link(b) + 2],
                    Policy::CHECKPOINT,
                )
            })
            .collect(),
    );
    assert_exact_and_meta_matches_cpu(&runs, n);
    // The membrane sequence of each block's LIF: f32 of its output's shape, [T, N, C, H, W] at
    // T = 4 and 48x48 inputs halved by each pool.
    let channels = [64, 128, 256, 256, 512, 512, 512, 512];
    let mut side = 48u64;
    let mut membranes = 0u64;
    for (b, c) in channels.into_iter().enumerate() {
        if POOLED.contains(&b) {
            side /= 2;
        }
        membranes += 4 * n as u64 * c * side * side * 4;
    }
    let held_alone = step_figures(&alone, Device::META, n).1;
    let held_runs = step_figures(&runs, Device::META, n).1;
    assert_eq!(held_alone - held_runs, membranes);
}

#[test]
fn runs_through_proj_bn_compose_with_chunks_and_policies_inside() {
    let chunked = |chunks| Policy::checkpoint(CompressorKind::BitSpike, chunks);
    let replayed = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 4,
        boundaries: ChunkBoundaries::Replayed,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let p = plan(vec![
        // proj_bn's two links as a run of the block: proj_bn runs whole inside it.
        run("features.0", [0, 2], Policy::CHECKPOINT),
        // Pool, convolution, BatchNorm and neuron minus the pool, in time chunks (BatchNorm
        // statistics and gradient sums in passes over the chunks).
        run("features.2", [1, 4], chunked(2)),
        // BatchNorm and neuron with replayed chunk boundaries; the convolution before them
        // keeps its spike input packed.
        run("features.3", [1, 3], replayed),
        module("features.3.proj_bn.0", Policy::StorePacked),
        // The whole block as a run, with proj_bn checkpointed inside it.
        run("features.4", [0, 4], chunked(2)),
        module("features.4.proj_bn", Policy::CHECKPOINT),
        // The pool and the convolution: a run inside proj_bn, named on the block.
        run("features.6", [0, 2], Policy::CHECKPOINT),
    ]);
    assert_exact_and_meta_matches_cpu(&p, 1);
}

#[test]
fn a_policy_that_a_run_would_bypass_is_rejected_and_the_model_keeps_its_plan() {
    let mut model = dvs_vgg(Device::META);
    let before = plan(vec![module("features.1", Policy::CHECKPOINT)]);
    model.apply_plan(&before).unwrap();
    let bypassed = plan(vec![
        run("features.3", [1, 3], Policy::CHECKPOINT),
        module("features.3.proj_bn", Policy::CHECKPOINT),
    ]);
    let err = model.apply_plan(&bypassed).unwrap_err().to_string();
    assert!(
        err.contains("features.3[1..3] covers part of 'features.3.proj_bn'")
            && err.contains("drop the policy"),
        "{err}"
    );
    let err = model
        .apply_plan(&plan(vec![run("features.3", [0, 4], Policy::CHECKPOINT)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("0 <= start < end <= 3 (its chain's links"), "{err}");
    assert_eq!(model.plan(), before.clone());
    // Covering all of proj_bn's links, or none, leaves its policy in force.
    for ok in [
        plan(vec![
            run("features.3", [0, 3], Policy::CHECKPOINT),
            module("features.3.proj_bn", Policy::CHECKPOINT),
        ]),
        plan(vec![
            run("features.3", [2, 3], Policy::CHECKPOINT),
            module("features.3.proj_bn", Policy::CHECKPOINT),
        ]),
    ] {
        model.apply_plan(&ok).unwrap();
    }
}
