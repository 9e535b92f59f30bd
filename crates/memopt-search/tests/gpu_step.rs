//! A whole training step of every zoo model on the GPU: gradients within 1e-4 relative of the
//! CPU's; under random plans (checkpoints, chunks, runs of children) gradients, BatchNorm
//! running statistics and final neuron states bit-identical to the GPU's store-everything step;
//! the peak of Meta with the CUDA target equal to the GPU tracker's peak, to the byte. Each test
//! skips with the reason when there is no GPU, and fails under MEMOPT_REQUIRE_GPU=1.

use memopt_checkpoint::{Plan, StepOptions, zoo};
use memopt_core::cuda::gpu_or_skip;
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Philox, Tensor};
use memopt_profiler::cost::Throughput;
use memopt_profiler::{CostModel, Workload};
use memopt_search::builder::{OptionSpace, chain_model};
use memopt_search::chain::plan_entries;
use memopt_search::sites::discover;

const GPU: Device = Device::Cuda(0);

/// What one step leaves: its peak, every parameter gradient, every buffer (BatchNorm running
/// statistics) after the update, and the final neuron states, as host values.
struct Step {
    peak: u64,
    grads: Vec<(String, Vec<f32>)>,
    buffers: Vec<(String, Vec<f32>)>,
    states: Vec<(String, Vec<f32>)>,
}

fn step(workload: &Workload, plan: &Plan, device: Device) -> Step {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let (model, mut trainer, batch) = workload.instantiate(device, plan).unwrap().into_parts();
    let opts = StepOptions {
        keep_grads: true,
        keep_states: true,
        ..StepOptions::default()
    };
    let out = trainer.step(&model, &batch, opts).unwrap();
    let peak = tracker.peak_bytes();
    let host = |t: &Tensor| {
        if device.is_meta() {
            Vec::new()
        } else {
            t.to_vec_f32().unwrap()
        }
    };
    let grads = out.grads.as_ref().unwrap();
    Step {
        peak,
        grads: model
            .params()
            .into_iter()
            .map(|(path, p)| (path, grads.get(p.id()).map(host).unwrap_or_default()))
            .collect(),
        buffers: model
            .buffers()
            .into_iter()
            .map(|(path, b)| (path, host(b.tensor())))
            .collect(),
        states: out
            .final_states
            .iter()
            .map(|(p, t)| (p.clone(), host(t)))
            .collect(),
    }
}

fn assert_close(what: &str, cpu: &[(String, Vec<f32>)], gpu: &[(String, Vec<f32>)], rel: f64) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: count");
    for ((path, c), (_, g)) in cpu.iter().zip(gpu) {
        assert_eq!(c.len(), g.len(), "{what} {path}: length");
        let floor = c.iter().fold(0f64, |m, v| m.max(v.abs() as f64)) * rel;
        for (i, (&a, &b)) in c.iter().zip(g).enumerate() {
            let err = (a as f64 - b as f64).abs();
            assert!(
                err <= rel * (a as f64).abs() || err <= floor,
                "{what} {path}[{i}]: cpu {a} gpu {b} (relative tolerance {rel})"
            );
        }
    }
}

fn bits(v: &[(String, Vec<f32>)]) -> Vec<(String, Vec<u32>)> {
    v.iter()
        .map(|(p, x)| (p.clone(), x.iter().map(|f| f.to_bits()).collect()))
        .collect()
}

/// `count` random plans of zoo model `name` at batch `n`, drawn from its chain model with a
/// fixed seed (as in chain_exactness.rs).
fn random_plans(name: &str, n: usize, count: usize) -> Vec<Plan> {
    let workload = Workload::zoo_small(name, n).unwrap();
    let tracker = MemoryTracker::new(Device::META);
    let _installed = MemoryTracker::install(tracker.clone());
    let model = workload.build_model(Device::META).unwrap();
    let input = Tensor::zeros(
        model.spec().input_dims(n),
        DType::F32,
        Device::META,
        MemoryKind::Input,
    )
    .unwrap();
    let root = discover(&model, &input).unwrap();
    let cost = CostModel::from_workload(&workload, Throughput::cpu_default()).unwrap();
    let chain = chain_model(&model, &root, n, 0, &OptionSpace::default(), &cost).unwrap();
    let mut rng = Philox::new(11);
    let mut pick = |k: usize| (rng.next_uniform() * k as f32) as usize % k;
    (0..count)
        .map(|_| Plan {
            version: 1,
            entries: plan_entries(&chain.pick_plan(&mut pick)),
        })
        .collect()
}

fn check_model(name: &str, n: usize, plans: usize) {
    let workload = Workload::zoo_small(name, n).unwrap();
    let store = Plan::store_all();
    let cpu = step(&workload, &store, Device::Cpu);
    let gpu = step(&workload, &store, GPU);
    let meta = step(&workload, &store, GPU.meta());
    assert_close(&format!("{name} gradients"), &cpu.grads, &gpu.grads, 1e-4);
    assert_close(
        &format!("{name} running statistics"),
        &cpu.buffers,
        &gpu.buffers,
        1e-4,
    );
    assert_eq!(
        meta.peak, gpu.peak,
        "{name}: Meta (CUDA target) peak vs GPU tracker peak (bytes)"
    );
    for (i, plan) in random_plans(name, n, plans).iter().enumerate() {
        let what = format!("{name} plan {i} {:?}", plan.entries);
        let planned = step(&workload, plan, GPU);
        assert_eq!(bits(&planned.grads), bits(&gpu.grads), "{what}: gradients");
        assert_eq!(
            bits(&planned.buffers),
            bits(&gpu.buffers),
            "{what}: BatchNorm statistics"
        );
        assert_eq!(bits(&planned.states), bits(&gpu.states), "{what}: neuron states");
        assert_eq!(
            step(&workload, plan, GPU.meta()).peak,
            planned.peak,
            "{what}: Meta (CUDA target) peak vs GPU peak"
        );
    }
}

#[test]
fn every_zoo_model_steps_on_the_gpu_like_the_cpu_and_plans_are_exact() {
    if !gpu_or_skip("every_zoo_model_steps_on_the_gpu_like_the_cpu_and_plans_are_exact") {
        return;
    }
    for entry in zoo::entries() {
        check_model(entry.name, 2, 4);
    }
}
