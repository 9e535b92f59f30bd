//! Shared test helpers: random valid plans and report comparison.

#![allow(dead_code)]

use memopt_checkpoint::{ChunkBoundaries, Model, Plan, PlanEntry, Policy, PolicyTable, RunShape};
use memopt_compress::CompressorKind;
use memopt_core::Device;
use memopt_profiler::MemoryReport;

/// Compressors whose payload size depends only on the shape (everything but Sparse).
pub const SHAPE_ONLY: [CompressorKind; 5] = [
    CompressorKind::Null,
    CompressorKind::BitSpike,
    CompressorKind::U8,
    CompressorKind::F16,
    CompressorKind::BF16,
];

/// A random valid plan for `model` from the random choices in `picks`: each module (the root
/// included) is stored, stored with packed spike inputs, checkpointed (random compressor from
/// `compressors`, random chunks where the segment allows them) or offloaded, and random runs of consecutive children of containers
/// that support them share a checkpoint (every other one going on into the next child's first
/// links where that is valid). `picks[0]` sets the density (from every module
/// considered to about a quarter of them). Entries that would make the plan invalid are retried
/// with one chunk, then left out.
pub fn random_plan(model: &Model, picks: &[u32], compressors: &[CompressorKind]) -> Plan {
    let run = RunShape {
        training: model.is_training(),
        time_steps: Some(model.spec().time_steps),
    };
    let t = model.spec().time_steps;
    let mut plan = Plan::store_all();
    let push = |plan: &mut Plan,
                path: &str,
                children: Option<[usize; 2]>,
                into_next: usize,
                candidates: Vec<Policy>| {
        for policy in candidates {
            let mut next = plan.clone();
            next.entries.push(PlanEntry {
                path: path.to_string(),
                children,
                into_next,
                policy,
            });
            if PolicyTable::from_plan(model.root(), &next, run).is_ok() {
                *plan = next;
                return true;
            }
        }
        false
    };
    // Chunk-boundary states kept or replayed, from a bit of the random choice.
    let checkpoint = |compressor, chunks, r: u32| {
        let boundaries = if (r / 1024) % 2 == 1 {
            ChunkBoundaries::Replayed
        } else {
            ChunkBoundaries::Kept
        };
        vec![
            Policy::Checkpoint {
                compressor,
                chunks,
                boundaries,
                batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
            },
            Policy::checkpoint(compressor, 1),
        ]
    };
    let density = picks.first().map_or(0, |p| p % 4);
    for (info, &r) in model.modules().iter().zip(picks.iter().cycle()) {
        if (r / 13) % 4 < density {
            continue;
        }
        let compressor = compressors[(r / 8) as usize % compressors.len()];
        let candidates = match r % 5 {
            0 => continue,
            1 => vec![Policy::StorePacked],
            2 => {
                let chunks = 1 + (r as usize / 64) % t;
                vec![
                    Policy::Offload {
                        compressor,
                        chunks,
                        boundaries: ChunkBoundaries::Kept,
                        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
                    },
                    Policy::offload(compressor, 1),
                ]
            }
            _ => checkpoint(compressor, 1 + (r as usize / 64) % t, r),
        };
        push(&mut plan, &info.path, None, 0, candidates);
    }
    for (info, &r) in model.modules().iter().zip(picks.iter().rev().cycle()) {
        let runs_allowed = model
            .module(&info.path)
            .is_some_and(|m| m.supports_child_ranges());
        if !runs_allowed || info.children < 2 || r % 3 == 0 {
            continue;
        }
        let n = info.children;
        let start = (r as usize / 3) % (n - 1);
        let end = start + 1 + (r as usize / 7) % (n - start);
        let compressor = compressors[(r / 5) as usize % compressors.len()];
        let policies = checkpoint(compressor, 1 + (r as usize / 11) % t, r / 3);
        // Every other run first tries going on into the next child's first links (where that
        // child runs a chain: a VGG block's pool, or its pool and convolution).
        let into_next = 1 + (r as usize / 17) % 2;
        if !(r % 2 == 0
            && push(
                &mut plan,
                &info.path,
                Some([start, end]),
                into_next,
                policies.clone(),
            ))
        {
            push(&mut plan, &info.path, Some([start, end]), 0, policies);
        }
    }
    plan
}

/// `report` with what legitimately differs between a CPU measurement and a Meta estimate
/// removed: the device and the clock.
pub fn without_device_and_time(report: &MemoryReport) -> MemoryReport {
    let mut r = report.clone();
    r.device = Device::META;
    for p in r.timeline.iter_mut() {
        p.time_ns = 0;
    }
    r
}
