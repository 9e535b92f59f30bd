//! Shared test helpers: random valid plans and report comparison.

#![allow(dead_code)]

use memopt_checkpoint::{Model, Plan, PlanEntry, Policy, PolicyTable, RunShape};
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
/// included) is stored, checkpointed (random compressor from `compressors`, random chunks where
/// the segment allows them) or offloaded. Entries that would make the plan invalid are retried
/// with one chunk.
pub fn random_plan(model: &Model, picks: &[u32], compressors: &[CompressorKind]) -> Plan {
    let run = RunShape {
        training: model.is_training(),
        time_steps: Some(model.spec().time_steps),
    };
    let t = model.spec().time_steps;
    let mut plan = Plan::store_all();
    for (info, &r) in model.modules().iter().zip(picks.iter().cycle()) {
        let compressor = compressors[(r / 8) as usize % compressors.len()];
        let candidates = match r % 5 {
            0 | 1 => continue,
            2 => vec![Policy::Offload { compressor }],
            _ => {
                let chunks = 1 + (r as usize / 64) % t;
                vec![
                    Policy::Checkpoint { compressor, chunks },
                    Policy::Checkpoint {
                        compressor,
                        chunks: 1,
                    },
                ]
            }
        };
        for policy in candidates {
            let mut next = plan.clone();
            next.entries.push(PlanEntry {
                path: info.path.clone(),
                policy,
            });
            if PolicyTable::from_plan(model.root(), &next, run).is_ok() {
                plan = next;
                break;
            }
        }
    }
    plan
}

/// `report` with what legitimately differs between a CPU measurement and a Meta estimate
/// removed: the device and the clock.
pub fn without_device_and_time(report: &MemoryReport) -> MemoryReport {
    let mut r = report.clone();
    r.device = Device::Meta;
    for p in r.timeline.iter_mut() {
        p.time_ns = 0;
    }
    r
}
