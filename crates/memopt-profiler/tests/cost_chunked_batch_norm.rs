//! A segment run in time chunks prices the passes of its training BatchNorms: per BatchNorm a
//! statistics pass (the leaves up to it) in forward, and a gradient-sums pass (the whole
//! segment's forward and the backward from the BatchNorm on) in backward; kept BatchNorm
//! inputs take the layers before the first BatchNorm off every later forward pass.

use memopt_checkpoint::{InputSpec, Plan, Policy};
use memopt_compress::CompressorKind;
use memopt_profiler::cost::{Throughput, TypeFactors};
use memopt_profiler::{CostModel, Workload};

fn vgg() -> CostModel {
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    CostModel::from_workload(
        &Workload::zoo("cifar10dvs-vgg", spec, 2),
        Throughput::cpu_default(),
    )
    .unwrap()
}

fn checkpoint(path: &str, chunks: usize) -> Plan {
    Plan::from_entries([(path, Policy::checkpoint(CompressorKind::BitSpike, chunks))])
}

#[test]
fn chunked_batch_norm_segments_price_their_passes() {
    let m = vgg();
    let fwd = |p: &str| m.forward_ms(p);
    let bwd = |p: &str| m.backward_ms(p);
    // features.1 = proj_bn (conv `0`, BatchNorm `1`) and neuron.
    let (conv, bn, sn) = (
        "features.1.proj_bn.0",
        "features.1.proj_bn.1",
        "features.1.neuron",
    );
    let passes = fwd(conv) + fwd(bn) + fwd("features.1") + bwd(bn) + bwd(sn);
    assert!(passes > fwd("features.1"));
    let extra = m.plan_extra_ms(&checkpoint("features.1", 2)) - m.plan_extra_ms(&checkpoint("features.1", 1));
    assert!((extra - passes).abs() <= 1e-9 * passes, "{extra} vs {passes}");
    // Chunks of a segment without BatchNorm cost what one chunk costs.
    assert_eq!(
        m.plan_extra_ms(&checkpoint("features.1.neuron", 4)),
        m.plan_extra_ms(&checkpoint("features.1.neuron", 1))
    );
    // A chunked segment inside another chunked segment runs no passes of its own.
    let nested = Plan::from_entries([
        ("features", Policy::checkpoint(CompressorKind::BitSpike, 2)),
        ("features.1", Policy::checkpoint(CompressorKind::BitSpike, 2)),
    ]);
    let flat = Plan::from_entries([
        ("features", Policy::checkpoint(CompressorKind::BitSpike, 2)),
        ("features.1", Policy::checkpoint(CompressorKind::BitSpike, 1)),
    ]);
    assert_eq!(m.plan_extra_ms(&nested), m.plan_extra_ms(&flat));
}

/// Calibrated, the passes are priced as what they are: the statistics pass re-runs the leaves up
/// to the BatchNorm at their forward factor (their outputs are read), the gradient-sums pass the
/// whole segment, whose last leaf (the neuron: it ends the block) is at its recompute factor,
/// and the backward ones at the backward factor. Factors that differ per phase make a wrong
/// pricing visible: with every forward re-run at the recompute factor the figure is off.
#[test]
fn calibrated_passes_use_the_forward_recompute_and_backward_factors() {
    let mut m = vgg();
    let types: Vec<String> = m
        .modules
        .iter()
        .filter(|e| e.leaf)
        .map(|e| e.module_type.clone())
        .collect();
    for ty in types {
        m.factors.insert(
            ty,
            TypeFactors {
                forward: 1.5,
                backward: 2.5,
                recompute_last: 4.0,
            },
        );
    }
    let (fwd, bwd) = (|p: &str| m.forward_ms(p), |p: &str| m.backward_ms(p));
    let (conv, bn, sn) = (
        "features.1.proj_bn.0",
        "features.1.proj_bn.1",
        "features.1.neuron",
    );
    let whole = fwd(conv) + fwd(bn) + m.recompute_ms(sn);
    assert!((m.recompute_ms("features.1") - whole).abs() <= 1e-12 * whole);
    let passes = fwd(conv) + fwd(bn) + whole + bwd(bn) + bwd(sn);
    let extra = m.plan_extra_ms(&checkpoint("features.1", 2)) - m.plan_extra_ms(&checkpoint("features.1", 1));
    assert!((extra - passes).abs() <= 1e-9 * passes, "{extra} vs {passes}");
    let at_recompute = (4.0 / 1.5) * (2.0 * fwd(conv) + 2.0 * fwd(bn) + fwd(sn)) + bwd(bn) + bwd(sn);
    assert!(
        (extra - at_recompute).abs() > 1e-3 * at_recompute,
        "{extra} vs {at_recompute}"
    );
}

fn replayed(path: &str, chunks: usize) -> Plan {
    Plan::from_entries([(
        path,
        Policy::Checkpoint {
            compressor: CompressorKind::BitSpike,
            chunks,
            boundaries: memopt_checkpoint::ChunkBoundaries::Replayed,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
    )])
}

/// Replayed boundary states cost, per backward pass, the forward of the chunks before each
/// chunk: with T = 4, 3 chunks ([2, 1, 1], starting at 0, 2, 3) replay 5/4 of the segment's
/// recomputed forward per pass; the passes are the backward proper and one gradient-sums pass
/// per BatchNorm (features.1 has one), none of those for a segment nested in a chunked one.
#[test]
fn replayed_boundaries_price_the_chunks_they_run_again() {
    let m = vgg();
    assert_eq!(m.time_steps, 4);
    let forward = m.forward_ms("features.1");
    let extra = m.plan_extra_ms(&replayed("features.1", 3)) - m.plan_extra_ms(&checkpoint("features.1", 3));
    let want = 2.0 * (5.0 / 4.0) * forward;
    assert!((extra - want).abs() <= 1e-9 * want, "{extra} vs {want}");
    // 4 chunks of one step: 0 + 1 + 2 + 3 steps replayed, 6/4 per pass.
    let extra = m.plan_extra_ms(&replayed("features.1", 4)) - m.plan_extra_ms(&checkpoint("features.1", 4));
    let want = 2.0 * (6.0 / 4.0) * forward;
    assert!((extra - want).abs() <= 1e-9 * want, "{extra} vs {want}");
    // Every other boundary kept (chunks 0 and 2 save their states): chunks 1 and 3 replay
    // one step each, 2/4 per pass; every boundary kept costs nothing; every 4th, as replayed.
    let kept_every = |m: usize| {
        Plan::from_entries([(
            "features.1",
            Policy::Checkpoint {
                compressor: CompressorKind::BitSpike,
                chunks: 4,
                boundaries: memopt_checkpoint::ChunkBoundaries::KeptEvery(m),
                batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
            },
        )])
    };
    let kept = m.plan_extra_ms(&checkpoint("features.1", 4));
    let extra = m.plan_extra_ms(&kept_every(2)) - kept;
    let want = 2.0 * (2.0 / 4.0) * forward;
    assert!((extra - want).abs() <= 1e-9 * want, "{extra} vs {want}");
    assert_eq!(m.plan_extra_ms(&kept_every(1)), kept);
    assert_eq!(
        m.plan_extra_ms(&kept_every(4)),
        m.plan_extra_ms(&replayed("features.1", 4))
    );
    // Nested in a chunked segment: the backward pass only.
    let outer = ("features", Policy::checkpoint(CompressorKind::BitSpike, 2));
    let inner = |boundaries| {
        (
            "features.1",
            Policy::Checkpoint {
                compressor: CompressorKind::BitSpike,
                chunks: 2,
                boundaries,
                batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
            },
        )
    };
    let extra = m.plan_extra_ms(&Plan::from_entries([
        outer,
        inner(memopt_checkpoint::ChunkBoundaries::Replayed),
    ])) - m.plan_extra_ms(&Plan::from_entries([
        outer,
        inner(memopt_checkpoint::ChunkBoundaries::Kept),
    ]));
    let want = (2.0 / 4.0) * forward;
    assert!((extra - want).abs() <= 1e-9 * want, "{extra} vs {want}");
}

/// Kept BatchNorm inputs: every forward pass after the first statistics pass (one per
/// BatchNorm: the later statistics passes and the pass giving the outputs) skips the leaves
/// before the first BatchNorm, so that many forwards of them come off the passes' price.
#[test]
fn kept_batch_norm_inputs_take_the_skipped_layers_off_the_passes() {
    let m = vgg();
    let kept = |path: &str, chunks| {
        Plan::from_entries([(
            path,
            Policy::checkpoint(CompressorKind::BitSpike, chunks)
                .with_batch_norm_inputs(memopt_checkpoint::BatchNormInputs::Kept),
        )])
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    // features.1: one BatchNorm after its convolution.
    let conv = m.forward_ms("features.1.proj_bn.0");
    assert!(conv > 0.0);
    let saved = m.plan_extra_ms(&checkpoint("features.1", 2)) - m.plan_extra_ms(&kept("features.1", 2));
    assert!(close(saved, conv), "{saved} ms saved, want {conv} ms");
    // features (blocks 0 to 7) in 2 chunks: eight BatchNorms, each pass after the first skips
    // block 0's convolution.
    let conv0 = m.forward_ms("features.0.proj_bn.0");
    let saved = m.plan_extra_ms(&checkpoint("features", 2)) - m.plan_extra_ms(&kept("features", 2));
    assert!(
        close(saved, 8.0 * conv0),
        "{saved} ms saved, want {} ms",
        8.0 * conv0
    );
}
