//! A small Spikformer and a small Spike-Driven Transformer under plans that reach inside them:
//! attention and MLP checkpointed, stored with packed spikes (Q, K, V kept bit-packed), run in
//! time chunks through BatchNorm over tokens, offloaded, and runs of the stem. Every plan is
//! bit-identical to storing everything over two steps, and Meta's peaks equal the CPU's.

mod common;

use common::{assert_exact_and_meta_matches_cpu, entry, plan_of};
use memopt_checkpoint::zoo::{SpikeDrivenConfig, SpikformerConfig, spike_driven_transformer, spikformer};
use memopt_checkpoint::{InputSpec, Model, Plan, Policy};
use memopt_compress::CompressorKind;
use memopt_core::Device;

/// 16 dims, 2 heads, 2 blocks, MLP ratio 2, on 2 time steps of 3x8x8 (4 tokens).
fn model(device: Device) -> Model {
    let cfg = SpikformerConfig {
        dims: 16,
        heads: 2,
        depth: 2,
        mlp_ratio: 2,
        patch: 4,
    };
    let spec = InputSpec {
        time_steps: 2,
        sample: vec![3, 8, 8],
        classes: 4,
    };
    spikformer("spikformer", cfg, &spec, device, 7).unwrap()
}

#[test]
fn plans_inside_the_spikformer_are_exact_and_meta_predicts_the_cpu() {
    let chunked = Policy::checkpoint(CompressorKind::BitSpike, 2);
    let plans = [
        Plan::store_all(),
        Plan::default(),
        Plan::from_entries([
            ("blocks.0.attn", Policy::CHECKPOINT),
            ("blocks.1.mlp", Policy::CHECKPOINT),
        ]),
        Plan::from_entries([
            ("blocks.0.attn", Policy::StorePacked),
            ("blocks.1.attn", Policy::StorePacked),
        ]),
        Plan::from_entries([
            ("blocks.0.attn", chunked),
            ("blocks.0.mlp", chunked),
            ("blocks.1", chunked),
        ]),
        Plan::from_entries([
            ("patch_embed.positional_encoding", chunked),
            ("blocks.1.attn", Policy::offload(CompressorKind::BitSpike, 1)),
        ]),
        plan_of(vec![
            entry("patch_embed.stages", Some([0, 3]), 0, Policy::CHECKPOINT),
            entry("blocks", Some([0, 2]), 0, chunked),
        ]),
    ];
    for plan in &plans {
        assert_exact_and_meta_matches_cpu(model, plan, 2);
    }
}

#[test]
fn packed_saves_keep_queries_keys_and_values_bit_packed() {
    // Under StorePacked an attention keeps four spike tensors of E = T*N*C*L values at one bit
    // each instead of four bytes: Q, K and V for the products and the projection's input.
    let e = 2 * 2 * 16 * 4;
    let held = |plan: &Plan| {
        common::step_recorded(model, plan, Device::META, 2)
            .1
            .held_at_backward()
    };
    let store = held(&Plan::store_all());
    let packed = held(&Plan::from_entries([("blocks.0.attn", Policy::StorePacked)]));
    let saved = 4 * (4 * e - e / 8);
    assert_eq!(store - packed, saved as u64, "store {store} packed {packed}");
}

/// 16 dims, 2 heads, 2 blocks, MLP ratio 2, pooling in the last two stem stages, on 2 time
/// steps of 3x8x8 (4 positions).
fn spike_driven(device: Device) -> Model {
    let cfg = SpikeDrivenConfig {
        dims: 16,
        heads: 2,
        depth: 2,
        mlp_ratio: 2,
        pooling: [false, false, true, true],
    };
    let spec = InputSpec {
        time_steps: 2,
        sample: vec![3, 8, 8],
        classes: 4,
    };
    spike_driven_transformer("spike-driven", cfg, &spec, device, 9).unwrap()
}

#[test]
fn plans_inside_the_spike_driven_transformer_are_exact_and_meta_predicts_the_cpu() {
    let chunked = Policy::checkpoint(CompressorKind::BitSpike, 2);
    let plans = [
        Plan::default(),
        Plan::from_entries([
            ("patch_embed", Policy::CHECKPOINT),
            ("blocks.0.attn", Policy::CHECKPOINT),
        ]),
        Plan::from_entries([
            ("blocks.0.attn", Policy::StorePacked),
            ("blocks.1.mlp", Policy::StorePacked),
        ]),
        Plan::from_entries([
            ("blocks.0.attn", chunked),
            ("blocks.1", chunked),
            ("patch_embed", chunked),
        ]),
        Plan::from_entries([("blocks.1.attn", Policy::offload(CompressorKind::BitSpike, 1))]),
    ];
    for plan in &plans {
        assert_exact_and_meta_matches_cpu(spike_driven, plan, 2);
    }
}

#[test]
fn the_spike_driven_time_mean_is_not_offered_to_time_chunks() {
    let mut model = spike_driven(Device::META);
    let plan = Plan::from_entries([("time_mean", Policy::checkpoint(CompressorKind::BitSpike, 2))]);
    let e = model.apply_plan(&plan).unwrap_err().to_string();
    assert!(e.contains("time_mean") && e.contains("time steps"), "{e}");
}

#[test]
fn recomputed_segments_ending_in_a_residual_chain_read_its_last_child() {
    // A residual chain's last child is not the chain's output (the add is): recomputing a
    // segment that ends in one must still materialise that child's output.
    for plan in [
        Plan::from_entries([("blocks.0.mlp", Policy::CHECKPOINT)]),
        Plan::from_entries([("blocks.0", Policy::CHECKPOINT)]),
        Plan::from_entries([("blocks", Policy::CHECKPOINT)]),
    ] {
        assert_exact_and_meta_matches_cpu(spike_driven, &plan, 2);
        assert_exact_and_meta_matches_cpu(model, &plan, 2);
    }
}

/// Linear - LIF - residual(Linear - LIF - Linear) - Linear: the residual chain ends in a
/// layer whose backward does not keep its output.
fn residual_ending_in_a_linear(device: Device) -> Model {
    use memopt_checkpoint::module::{Init, Linear, Neuron, Sequential};
    let mut init = Init::new(device, 5);
    let f = 6;
    let residual = Sequential::new()
        .push(Linear::new(&mut init, f, f, true).unwrap())
        .push(Neuron::lif(&mut init, 2.0).unwrap())
        .push(Linear::new(&mut init, f, f, true).unwrap())
        .residual();
    let root = Sequential::new()
        .push(Linear::new(&mut init, f, f, true).unwrap())
        .push(Neuron::lif(&mut init, 2.0).unwrap())
        .push(residual)
        .push(Linear::new(&mut init, f, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: 2,
        sample: vec![f],
        classes: 3,
    };
    Model::new("residual-linear", Box::new(root), spec, device)
}

#[test]
fn a_recomputed_residual_chain_materialises_its_last_child() {
    for plan in [
        Plan::from_entries([("2", Policy::CHECKPOINT)]),
        Plan::from_entries([("1", Policy::CHECKPOINT), ("2", Policy::CHECKPOINT)]),
    ] {
        assert_exact_and_meta_matches_cpu(residual_ending_in_a_linear, &plan, 2);
    }
}

#[test]
fn packed_saves_keep_the_spike_driven_operands_bit_packed() {
    // E = T*N*C*L = 2*2*16*4 values per spike tensor, F = T*N*C = 64 fired sums. Stored, the
    // attention keeps shortcut_lif's spikes (read by three convolutions), K, V (for K * V), Q
    // and the fired sums (for the row scale) and the projection's input, as f32. Packed, the
    // three convolutions keep a packed copy each and the rest one bit per value.
    let (e, f) = (2 * 2 * 16 * 4, 2 * 2 * 16);
    let held = |plan: &Plan| {
        common::step_recorded(spike_driven, plan, Device::META, 2)
            .1
            .held_at_backward()
    };
    let store = held(&Plan::store_all());
    let packed = held(&Plan::from_entries([("blocks.0.attn", Policy::StorePacked)]));
    let stored = 5 * 4 * e + 4 * f;
    let kept = 3 * e / 8 + 4 * e / 8 + f / 8;
    assert_eq!(
        store - packed,
        (stored - kept) as u64,
        "store {store} packed {packed}"
    );
}
