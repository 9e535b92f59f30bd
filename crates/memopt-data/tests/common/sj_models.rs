//! The two models whose weights are exchanged with SpikingJelly in tests, at small sizes, with
//! every BatchNorm's affine parameters and running statistics drawn from the seed too (so the
//! file exercises every tensor), and the fixed input both sides feed them.
//! Shared by `tests/spikingjelly_weights.rs` and `examples/export_seeded_weights.rs`, each of
//! which uses a part.
#![allow(dead_code)]

use memopt_checkpoint::{InputSpec, Model, zoo};
use memopt_core::{Device, Philox};

/// (zoo name, fixture stem, input spec) of the exchanged models.
pub fn cases() -> Vec<(&'static str, &'static str, InputSpec)> {
    vec![
        (
            "cifar10dvs-vgg",
            "vgg",
            InputSpec {
                time_steps: 2,
                sample: vec![2, 16, 16],
                classes: 10,
            },
        ),
        (
            "sew-resnet18",
            "sew_resnet18",
            InputSpec {
                time_steps: 2,
                sample: vec![3, 32, 32],
                classes: 10,
            },
        ),
    ]
}

/// Batch size of the fixed input.
pub const BATCH: usize = 2;
/// Seed of the weights.
pub const SEED: u64 = 15;

/// The zoo model with seeded weights, BatchNorm weight in [1, 2), bias in [0.5, 1.5) (so that
/// even the last stage of SEW-ResNet-18 spikes at T=2),
/// running mean in [-0.5, 0.5) and running variance in [0.5, 2).
pub fn seeded_model(name: &str, spec: &InputSpec) -> Model {
    let model = zoo::build(name, spec, Device::Cpu, SEED).unwrap();
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
