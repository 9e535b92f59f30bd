//! Memory policies change what is kept, never what is computed: parameter and input gradients,
//! BatchNorm running statistics, final neuron states, the loss and the updated parameters are
//! bit-identical to storing everything, for any assignment of policies (nested checkpoints,
//! time chunks, every lossless compressor, offload) on the CPU.

mod common;

use common::{fingerprint, fingerprint_with, tiny_conv_snn, zoo_small};
use memopt_checkpoint::{BatchNormInputs, ChunkBoundaries, Model, Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::Device;
use proptest::prelude::*;

/// Kept, replayed or every m-th kept chunk-boundary states (m from 1 to 3), from a random
/// choice.
fn boundaries(r: u32) -> ChunkBoundaries {
    match (r / 64) % 4 {
        1 => ChunkBoundaries::Replayed,
        2 => ChunkBoundaries::KeptEvery(1 + (r as usize / 256) % 3),
        _ => ChunkBoundaries::Kept,
    }
}

const LOSSLESS: [CompressorKind; 4] = [
    CompressorKind::Null,
    CompressorKind::BitSpike,
    CompressorKind::U8,
    CompressorKind::Sparse,
];

/// A random valid plan: each module gets store, store with packed spike inputs, checkpoint
/// (random lossless compressor and, where the segment allows it, random chunks) or offload,
/// from the random choices in `picks`.
fn random_plan(model: &Model, picks: &[u32]) -> Plan {
    random_plan_with(model, picks, &LOSSLESS)
}

/// [`random_plan`] drawing the compressors from `compressors`.
fn random_plan_with(model: &Model, picks: &[u32], compressors: &[CompressorKind]) -> Plan {
    let t = model.spec().time_steps;
    let mut entries = Vec::new();
    for (info, &r) in model
        .modules()
        .iter()
        .filter(|i| !i.path.is_empty())
        .zip(picks.iter().cycle())
    {
        let compressor = compressors[(r / 8) as usize % compressors.len()];
        let policy = match r % 5 {
            0 => continue,
            4 => Policy::StorePacked,
            kind => {
                // One in three recomputing entries offloads (its saved inputs to host memory,
                // per time chunk), the others checkpoint.
                let chunks = 1 + (r as usize / 32) % t;
                let boundaries = boundaries(r);
                let batch_norm_inputs = batch_norm_inputs(r);
                let (chunked, whole) = if kind == 1 {
                    let chunked = Policy::Offload {
                        compressor,
                        chunks,
                        boundaries,
                        batch_norm_inputs,
                    };
                    (chunked, Policy::offload(compressor, 1))
                } else {
                    let chunked = Policy::Checkpoint {
                        compressor,
                        chunks,
                        boundaries,
                        batch_norm_inputs,
                    };
                    (chunked, Policy::checkpoint(compressor, 1))
                };
                let recomputed = chunked.with_batch_norm_inputs(BatchNormInputs::Recomputed);
                let mut probe = Model::clone_policies_probe(model);
                [chunked, recomputed]
                    .into_iter()
                    .find(|&p| chunks > 1 && probe(&Plan::from_entries([(info.path.clone(), p)])))
                    .unwrap_or(whole)
            }
        };
        entries.push((info.path.clone(), policy));
    }
    let mut plan = Plan::from_entries(entries);
    // Runs of consecutive children of Sequential containers, as one segment each.
    for (info, &r) in model
        .modules()
        .iter()
        .filter(|i| i.type_name == "Sequential" && i.children > 1)
        .zip(picks.iter().rev().cycle())
    {
        if r % 3 == 0 {
            continue;
        }
        let n = info.children;
        let start = (r as usize / 3) % (n - 1);
        let end = start + 1 + (r as usize / 7) % (n - start);
        let compressor = compressors[(r / 5) as usize % compressors.len()];
        let chunks = 1 + (r as usize / 11) % t;
        // Sometimes going on into the next child's first links (where that child runs a
        // chain: a VGG block's pool and convolution), else the run alone.
        let into_next = if r % 2 == 0 { 1 + (r as usize / 13) % 2 } else { 0 };
        let chunked = Policy::Checkpoint {
            compressor,
            chunks,
            boundaries: boundaries(r),
            batch_norm_inputs: batch_norm_inputs(r / 3),
        };
        let recomputed = chunked.with_batch_norm_inputs(BatchNormInputs::Recomputed);
        for (policy, into_next) in [
            (chunked, into_next),
            (recomputed, into_next),
            (recomputed, 0),
            (Policy::checkpoint(compressor, 1), 0),
        ] {
            let mut candidate = plan.clone();
            candidate.entries.push(PlanEntry {
                path: info.path.clone(),
                children: Some([start, end]),
                into_next,
                policy,
            });
            let mut probe = Model::clone_policies_probe(model);
            if probe(&candidate) {
                plan = candidate;
                break;
            }
        }
    }
    // Half the plans update each parameter in backward, as soon as its gradient is final.
    plan.update_in_backward = picks.first().is_some_and(|r| r / 3 % 2 == 1);
    // Entries drawn one by one may nest a recomputed one among the layers a segment keeping
    // its BatchNorm inputs skips: then none keeps them.
    if !Model::clone_policies_probe(model)(&plan) {
        for e in &mut plan.entries {
            e.policy = e.policy.with_batch_norm_inputs(BatchNormInputs::Recomputed);
        }
    }
    plan
}

/// Whether a chunked entry drawn from `r` keeps its first BatchNorm's inputs for the later
/// forward passes (one in three; refused where the segment cannot, then recomputed).
fn batch_norm_inputs(r: u32) -> BatchNormInputs {
    if (r / 64).is_multiple_of(3) {
        BatchNormInputs::Kept
    } else {
        BatchNormInputs::Recomputed
    }
}

trait Probe {
    fn clone_policies_probe(model: &Model) -> Box<dyn FnMut(&Plan) -> bool + '_>;
}

impl Probe for Model {
    /// Whether a plan would be accepted (validation only; the model is not changed).
    fn clone_policies_probe(model: &Model) -> Box<dyn FnMut(&Plan) -> bool + '_> {
        Box::new(move |plan| {
            memopt_checkpoint::PolicyTable::from_plan(
                model.root(),
                plan,
                memopt_checkpoint::RunShape {
                    training: model.is_training(),
                    time_steps: Some(model.spec().time_steps),
                },
            )
            .is_ok()
        })
    }
}

fn check_plan_is_exact(
    build: impl Fn() -> Model,
    picks: &[u32],
    steps: usize,
    n: usize,
) -> Result<(), TestCaseError> {
    check_plan_is_exact_with(build, picks, steps, n, &LOSSLESS)
}

fn check_plan_is_exact_with(
    build: impl Fn() -> Model,
    picks: &[u32],
    steps: usize,
    n: usize,
    compressors: &[CompressorKind],
) -> Result<(), TestCaseError> {
    let baseline = fingerprint(&build(), steps, n);
    let mut model = build();
    let plan = random_plan_with(&model, picks, compressors);
    model.apply_plan(&plan).unwrap();
    let got = fingerprint(&model, steps, n);
    prop_assert_eq!(&got, &baseline, "plan {}", plan.to_json());
    // Without the final states (released as soon as nothing reads them), the same step.
    let mut model = build();
    model.apply_plan(&plan).unwrap();
    let released = fingerprint_with(&model, steps, n, false);
    prop_assert_eq!(
        &released,
        &baseline.without_states(),
        "plan {} without states",
        plan.to_json()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn tiny_conv_snn_is_exact_under_any_plan(picks in proptest::collection::vec(0u32..1024, 1..24), t in 1usize..5) {
        check_plan_is_exact(|| tiny_conv_snn(Device::Cpu, 3, t), &picks, 2, 2)?;
    }

    #[test]
    fn spiking_mlp_is_exact_under_any_plan(picks in proptest::collection::vec(0u32..1024, 1..8)) {
        check_plan_is_exact(|| zoo_small("spiking-mlp", Device::Cpu, 5), &picks, 2, 3)?;
    }

    /// Bit-packed saved inputs only: every checkpointed segment that starts with a convolution
    /// or a linear layer on spikes (tiny_conv_snn's block2, toy-if's blocks 1 and 2) reads
    /// them one time step at a time, chunked, nested and offloaded alike.
    #[test]
    fn packed_reads_are_exact_under_any_plan(picks in proptest::collection::vec(0u32..1024, 1..24), t in 1usize..5) {
        check_plan_is_exact_with(|| tiny_conv_snn(Device::Cpu, 4, t), &picks, 2, 2, &[CompressorKind::BitSpike])?;
        check_plan_is_exact_with(|| zoo_small("toy-if", Device::Cpu, 8), &picks, 1, 2, &[CompressorKind::BitSpike])?;
    }

    #[test]
    fn toy_if_is_exact_under_any_plan(picks in proptest::collection::vec(0u32..1024, 1..20)) {
        check_plan_is_exact(|| zoo_small("toy-if", Device::Cpu, 7), &picks, 1, 2)?;
    }
}

/// Every module checkpointed with the most chunks it accepts, nested inside checkpointed
/// parents: the hardest plan.
#[test]
fn nested_chunked_checkpoints_everywhere_are_exact() {
    let build = || tiny_conv_snn(Device::Cpu, 9, 4);
    let baseline = fingerprint(&build(), 2, 2);
    let mut model = build();
    // 107 and 108: checkpoint (r % 5 in 2..=3) with BitSpike ((r / 8) % 4 == 1) and 4 chunks
    // (1 + (r / 32) % 4) wherever the segment allows chunks.
    let picks: Vec<u32> = (0..64).map(|i| 107 + (i % 2)).collect();
    let plan = random_plan(&model, &picks);
    assert!(
        plan.entries.iter().any(|e| e.policy.chunks() > 1),
        "some module is chunked"
    );
    assert!(
        plan.entries.iter().all(|e| e.policy.recomputes()),
        "every entry checkpoints: {plan:?}"
    );
    model.apply_plan(&plan).unwrap();
    assert_eq!(fingerprint(&model, 2, 2), baseline);
    let mut model = build();
    model.apply_plan(&plan).unwrap();
    assert_eq!(fingerprint_with(&model, 2, 2, false), baseline.without_states());
}

fn chunked(
    path: &str,
    children: Option<[usize; 2]>,
    chunks: usize,
    (compressor, boundaries): (CompressorKind, ChunkBoundaries),
) -> PlanEntry {
    PlanEntry {
        path: path.into(),
        children,
        into_next: 0,
        policy: Policy::Checkpoint {
            compressor,
            chunks,
            boundaries,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Segments with training BatchNorm chunked over time (a block, a bare BatchNorm, a run of
    /// root children through both blocks, nested inside one another), with random chunk
    /// counts, compressors, boundary states kept or replayed, and BatchNorm inputs kept where
    /// a segment may keep them: bit-identical to storing everything.
    #[test]
    fn chunked_batch_norm_segments_are_exact(
        t in 2usize..6,
        ks in proptest::collection::vec(2usize..6, 3),
        shape in 0usize..4,
        c in 0usize..LOSSLESS.len(),
        replay in any::<bool>(),
        keep in any::<bool>(),
    ) {
        let k = |i: usize| ks[i].min(t);
        let replayed = if replay { ChunkBoundaries::Replayed } else { ChunkBoundaries::Kept };
        let comp = (LOSSLESS[c], replayed);
        let entries = match shape {
            0 => vec![chunked("block1", None, k(0), comp), chunked("block2", None, k(1), comp)],
            1 => vec![chunked("block1.bn", None, k(0), comp), chunked("block2", Some([0, 2]), k(1), comp)],
            2 => vec![chunked("", Some([0, 3]), k(0), comp), chunked("block2.bn", None, k(1), comp)],
            _ => vec![
                chunked("", Some([0, 4]), k(0), comp),
                chunked("block1", None, k(1), comp),
                chunked("block2.conv", None, k(2), comp),
            ],
        };
        let mut plan = Plan { entries, ..Plan::store_all() };
        let build = || tiny_conv_snn(Device::Cpu, 4, t);
        if keep {
            // Every entry that may keeps its BatchNorm inputs for the later forward passes.
            let model = build();
            for i in 0..plan.entries.len() {
                let mut candidate = plan.clone();
                candidate.entries[i].policy =
                    candidate.entries[i].policy.with_batch_norm_inputs(BatchNormInputs::Kept);
                if Model::clone_policies_probe(&model)(&candidate) {
                    plan = candidate;
                }
            }
        }
        let baseline = fingerprint(&build(), 2, 2);
        let mut model = build();
        model.apply_plan(&plan).unwrap();
        prop_assert_eq!(&fingerprint(&model, 2, 2), &baseline, "plan {}", plan.to_json());
        let mut model = build();
        model.apply_plan(&plan).unwrap();
        prop_assert_eq!(&fingerprint_with(&model, 2, 2, false), &baseline.without_states(), "plan {} without states", plan.to_json());
    }
}
