//! Pooled spikes kept as spike counts: on the CIFAR10-DVS VGG, block 2's `proj_bn` starts with
//! an average pool of block 1's spikes, so a checkpointed run of block 2's convolution,
//! BatchNorm and neuron has pooled spikes as input. Under a bit-packing policy the segment keeps
//! that input as one count per byte (a quarter of its f32 bytes) instead of whole, restores it as
//! counts for its recomputation (whose convolution keeps the counts for its weight gradient), and
//! the step stays exact: loss, gradients, running statistics, states and updated parameters
//! bit-identical to storing everything, Meta's peaks equal to the CPU's. Time chunks, runs into
//! the pool and offloading compose. Stored packed, a convolution reading pooled spikes keeps them
//! as spike counts too.

mod common;

use common::{entry, plan_of as plan, step_recorded};
use memopt_checkpoint::zoo;
use memopt_checkpoint::{Model, Plan, Policy};
use memopt_compress::CompressorKind;
use memopt_core::memory::MemoryAction;
use memopt_core::{Device, MemoryKind};

/// The VGG at T = 4 on 2x32x32 samples.
fn dvs_vgg(d: Device) -> Model {
    let mut spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
    spec.sample = vec![2, 32, 32];
    zoo::build("cifar10dvs-vgg", &spec, d, 1).unwrap()
}

const N: usize = 2;

/// Elements of block 2's pooled input at T = 4, batch N: 128 channels at 16x16.
const POOLED: u64 = 4 * N as u64 * 128 * 16 * 16;

/// Block 2's convolution, BatchNorm and neuron as one segment under `policy`.
fn block2_rest(policy: Policy) -> Plan {
    plan(vec![entry("features.2", Some([1, 4]), 0, policy)])
}

/// The sizes of the packed payloads one step under `p` allocates on Meta (bytes).
fn packed(p: &Plan) -> Vec<u64> {
    let recorder = step_recorded(dvs_vgg, p, Device::META, N).1;
    let events = recorder.0.lock().unwrap();
    events
        .iter()
        .filter(|e| e.0 == MemoryAction::Alloc && e.2 == MemoryKind::Packed)
        .map(|e| e.1)
        .collect()
}

fn held_at_backward(p: &Plan) -> u64 {
    step_recorded(dvs_vgg, p, Device::META, N).1.held_at_backward()
}

#[test]
fn a_segment_after_a_pool_keeps_its_input_as_spike_counts() {
    let counts = block2_rest(Policy::checkpoint(CompressorKind::BitSpike, 1));
    let whole = block2_rest(Policy::checkpoint(CompressorKind::Null, 1));
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &counts, N);
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &whole, N);
    // One byte per pooled value, and nothing else packed.
    assert_eq!(packed(&counts), vec![POOLED]);
    assert!(packed(&whole).is_empty());
    // Kept from forward to backward: the counts instead of the f32 values, to the byte.
    assert_eq!(held_at_backward(&whole) - held_at_backward(&counts), 3 * POOLED);
}

#[test]
fn time_chunks_runs_into_the_pool_and_offload_compose_with_spike_counts() {
    let bits = |chunks| Policy::checkpoint(CompressorKind::BitSpike, chunks);
    // Each of 4 time chunks keeps its own time step's counts.
    let chunked = block2_rest(bits(4));
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &chunked, N);
    assert_eq!(packed(&chunked), vec![POOLED / 4; 4]);
    // Block 1 and block 2's pool as one chunked segment: its output, assembled from the
    // chunks, is still known to be pooled spikes, so the next segment keeps counts.
    let into = plan(vec![
        entry("features", Some([1, 2]), 1, bits(4)),
        entry("features.2", Some([1, 4]), 0, bits(1)),
    ]);
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &into, N);
    assert!(packed(&into).contains(&POOLED), "{:?}", packed(&into));
    // Offloaded: the counts go to host memory and back.
    let offload = block2_rest(Policy::offload(CompressorKind::BitSpike, 1));
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &offload, N);
}

#[test]
fn storing_packed_keeps_a_convolutions_pooled_input_as_spike_counts() {
    // Block 2's convolution reads block 1's pooled spikes; stored packed, it keeps them as one
    // count per byte for its weight gradient instead of the f32 values.
    let packed_store = plan(vec![entry("features.2.proj_bn.1", None, 0, Policy::StorePacked)]);
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, &packed_store, N);
    assert_eq!(packed(&packed_store), vec![POOLED]);
    let stored = Plan::store_all();
    assert!(packed(&stored).is_empty());
    assert_eq!(
        held_at_backward(&stored) - held_at_backward(&packed_store),
        3 * POOLED
    );
}
