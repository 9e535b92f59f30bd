//! The two models whose weights are exchanged with SpikingJelly in tests, at small sizes, with
//! every BatchNorm's affine parameters and running statistics drawn from the seed too (so the
//! file exercises every tensor), and the fixed input both sides feed them.
//! Shared by `tests/spikingjelly_weights.rs` and `examples/export_seeded_weights.rs`, each of
//! which uses a part.
#![allow(dead_code)]

use memopt_checkpoint::zoo::{self, SpikeDrivenConfig, SpikformerConfig};
use memopt_checkpoint::{InputSpec, Model};
use memopt_core::{Device, Philox};

/// The small Spikformer of the fixture (SpikingJelly's `Spikformer(embed_dims=32,
/// num_heads=4, depths=2, mlp_ratio=4, patch_size=4)` on 16x16 input).
pub const SPIKFORMER_SMALL: SpikformerConfig = SpikformerConfig {
    dims: 32,
    heads: 4,
    depth: 2,
    mlp_ratio: 4,
    patch: 4,
};

/// The small Spike-Driven Transformer of the fixture (SpikingJelly's
/// `SpikeDrivenTransformer(embed_dims=32, num_heads=4, depths=2, mlp_ratio=4,
/// pooling_stat="0011")` on 16x16 input).
pub const SPIKE_DRIVEN_SMALL: SpikeDrivenConfig = SpikeDrivenConfig {
    dims: 32,
    heads: 4,
    depth: 2,
    mlp_ratio: 4,
    pooling: [false, false, true, true],
};

/// (model name, fixture stem, input spec) of the exchanged models: zoo names, `spikformer`
/// for [`SPIKFORMER_SMALL`] and `spike-driven` for [`SPIKE_DRIVEN_SMALL`].
pub fn cases() -> Vec<(&'static str, &'static str, InputSpec)> {
    let spec = |c: usize, hw: usize| InputSpec {
        time_steps: 2,
        sample: vec![c, hw, hw],
        classes: 10,
    };
    vec![
        ("cifar10dvs-vgg", "vgg", spec(2, 16)),
        ("sew-resnet18", "sew_resnet18", spec(3, 32)),
        ("spikformer", "spikformer", spec(3, 16)),
        ("spike-driven", "spike_driven", spec(3, 16)),
    ]
}

/// Model `name` of [`cases`] for `spec`, parameters drawn from stream `seed`.
pub fn build(name: &str, spec: &InputSpec, seed: u64) -> Model {
    match name {
        "spikformer" => zoo::spikformer(name, SPIKFORMER_SMALL, spec, Device::Cpu, seed).unwrap(),
        "spike-driven" => {
            zoo::spike_driven_transformer(name, SPIKE_DRIVEN_SMALL, spec, Device::Cpu, seed).unwrap()
        }
        _ => zoo::build(name, spec, Device::Cpu, seed).unwrap(),
    }
}

/// Batch size of the fixed input.
pub const BATCH: usize = 2;
/// Seed of the weights.
pub const SEED: u64 = 15;

/// The zoo model with seeded weights, BatchNorm weight in [1, 2), bias in [0.5, 1.5) (so that
/// even the last stage of SEW-ResNet-18 spikes at T=2),
/// running mean in [-0.5, 0.5) and running variance in [0.5, 2).
pub fn seeded_model(name: &str, spec: &InputSpec) -> Model {
    let model = build(name, spec, SEED);
    let mut rng = Philox::new(SEED + 1);
    let mut fill = |t: &memopt_core::Tensor, low: f32, high: f32| {
        let mut w = t.write::<f32>("seed").unwrap();
        for v in w.host_mut().unwrap() {
            *v = low + (high - low) * rng.next_uniform();
        }
    };
    for (n, p) in model.params() {
        if n.ends_with(".weight") && p.tensor().rank() == 1 {
            fill(p.tensor(), 1.0, 2.0);
        } else if n.ends_with(".bias") && p.tensor().rank() == 1 && is_bn(&model, &n) {
            fill(p.tensor(), 0.5, 1.5);
        }
    }
    for (n, b) in model.buffers() {
        if n.ends_with("running_mean") {
            fill(b.tensor(), -0.5, 0.5);
        } else {
            fill(b.tensor(), 0.5, 2.0);
        }
    }
    model
}

fn is_bn(model: &Model, param: &str) -> bool {
    let module = param.trim_end_matches(".bias");
    model
        .buffers()
        .iter()
        .any(|(n, _)| n == &format!("{module}.running_mean"))
}

/// The fixed input `[T, N, C, H, W]`: small integer counts from a hash of the index, computed
/// the same way in tools/fixtures/weights.py.
pub fn fixed_input(spec: &InputSpec) -> (Vec<usize>, Vec<f32>) {
    let dims = spec.input_dims(BATCH);
    let n: usize = dims.iter().product();
    let data = (0..n as u64)
        .map(|i| (((i * 2_654_435_761) >> 7) % 4) as f32)
        .collect();
    (dims, data)
}
