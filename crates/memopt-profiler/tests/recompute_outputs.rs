//! The memory profile of a recomputation holds no output that nobody reads: the last layer of
//! a recomputed segment (a BatchNorm, a neuron) leaves its recompute phase holding exactly its
//! output's bytes less than the same layer leaves a stored forward pass, on Meta as on the CPU.

use memopt_checkpoint::{Plan, Policy, zoo};
use memopt_compress::CompressorKind;
use memopt_core::{Device, Phase};
use memopt_profiler::{MemoryReport, Workload, profile_memory};

fn held_at_exit(r: &MemoryReport, path: &str, phase: Phase) -> u64 {
    r.module(path, phase)
        .unwrap_or_else(|| panic!("{path} has no figures in {phase:?}"))
        .held_at_exit_bytes
}

#[test]
fn the_last_layer_of_a_recomputed_segment_holds_no_output_at_exit() {
    let n = 2;
    // The CIFAR10-DVS VGG at its small T=4 on 2x32x32 inputs instead of 2x48x48 (2.25 times less
    // compute): the same blocks; the outputs (4 MiB and 2 MiB) are still large-pool blocks.
    let spec = memopt_checkpoint::InputSpec {
        sample: vec![2, 32, 32],
        ..zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    let workload = Workload::zoo("cifar10dvs-vgg", spec.clone(), n);
    let (t, h, w) = (spec.time_steps, spec.sample[1], spec.sample[2]);
    // Block 1's proj_bn ends with its BatchNorm (128 channels at H x W); block 3 ends with its
    // neuron (256 channels at H/2 x W/2, after block 2's pool).
    let cases = [
        (
            "features.1.proj_bn",
            "features.1.proj_bn.1",
            t * n * 128 * h * w * 4,
        ),
        (
            "features.3",
            "features.3.neuron",
            t * n * 256 * (h / 2) * (w / 2) * 4,
        ),
    ];
    let plan = Plan::from_entries(cases.iter().map(|(seg, _, _)| {
        let p = Policy::checkpoint(CompressorKind::BitSpike, 1);
        (seg.to_string(), p)
    }));
    let mut figures = Vec::new();
    for device in [Device::Cpu, Device::META] {
        let stored = profile_memory(&workload, &Plan::store_all(), device).unwrap();
        let planned = profile_memory(&workload, &plan, device).unwrap();
        for (_, last, output_bytes) in cases {
            let forward = held_at_exit(&stored, last, Phase::Forward);
            let recompute = held_at_exit(&planned, last, Phase::Recompute);
            assert_eq!(
                forward - recompute,
                output_bytes as u64,
                "{last} on {device}: the recomputation keeps what backward reads, not the output"
            );
            figures.push((forward, recompute));
        }
        figures.push((stored.peak_bytes, planned.peak_bytes));
    }
    let half = figures.len() / 2;
    assert_eq!(figures[..half], figures[half..], "Meta gives the CPU's figures");
}
