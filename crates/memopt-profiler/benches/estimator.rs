//! How long the estimator takes per plan (the planners' inner loop): every zoo model at its
//! published input size, storing everything and checkpointing every top-level block.
//!
//! `cargo bench -p memopt-profiler --bench estimator -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, criterion_group, criterion_main};
use memopt_checkpoint::{Plan, Policy, zoo};
use memopt_profiler::{Estimator, Workload};
use std::hint::black_box;

/// The batch of the published workload: N=32 for the CIFAR10-DVS VGG (SpikingJelly's memopt
/// example), N=16 for the ImageNet models, N=64 for the toy networks.
fn batch(name: &str) -> usize {
    match name {
        "cifar10dvs-vgg" => 32,
        "toy-if" | "spiking-mlp" => 64,
        _ => 16,
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("estimator");
    for entry in zoo::entries() {
        let workload = Workload::zoo(entry.name, entry.default.clone(), batch(entry.name));
        let mut estimator = Estimator::new(&workload).expect("zoo models build on Meta");
        let model = workload
            .build_model(memopt_core::Device::META)
            .expect("zoo models build on Meta");
        // The blocks: containers two levels down (VGG `features.i`, ResNet `layerk.i`), or one
        // level down for flat models.
        let modules = model.modules();
        let containers_at = |d: usize| modules.iter().filter(move |m| m.depth == d && m.children > 0);
        let depth = if containers_at(2).count() > 0 { 2 } else { 1 };
        let blocks: Vec<(String, Policy)> = containers_at(depth)
            .map(|m| (m.path.clone(), Policy::CHECKPOINT))
            .collect();
        let checkpointed = Plan::from_entries(blocks);
        let store = Plan::store_all();
        group.bench_function(format!("{}/store", entry.name), |b| {
            b.iter(|| black_box(estimator.peak_bytes(&store).expect("valid plan")))
        });
        group.bench_function(format!("{}/checkpoint-blocks", entry.name), |b| {
            b.iter(|| black_box(estimator.peak_bytes(&checkpointed).expect("valid plan")))
        });
        group.bench_function(format!("{}/report", entry.name), |b| {
            b.iter(|| black_box(estimator.report(&store).expect("valid plan").peak_bytes))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
