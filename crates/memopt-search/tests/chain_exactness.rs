//! The chain model's predicted peak equals the exact peak of a whole training step on Meta
//! (which equals the CPU's to the byte), for storing everything and for random plans (time
//! chunks of segments with training BatchNorm, segments reading their input packed and
//! layers storing their spike inputs packed included, alone and together).

use memopt_checkpoint::module::find_module;
use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::{
    Batch, BatchNormInputs, ChunkBoundaries, Model, Plan, PlanEntry, Policy, StepOptions, Target, Trainer,
    zoo,
};
use memopt_compress::CompressorKind;
use memopt_core::kernels::SgdConfig;
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, ModulePath, Philox, Tensor};
use memopt_profiler::cost::Throughput;
use memopt_profiler::{CostModel, Workload};
use memopt_search::builder::{OptionSpace, chain_model};
use memopt_search::chain::{ChainModel, Chosen, plan_entries};
use memopt_search::sites::{Site, discover};

fn sgd() -> SgdConfig {
    SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    }
}

/// Exact peak of one step of zoo model `name` (small spec) with batch `n` under `plan` on Meta
/// `device`, and the bytes held before the step starts.
fn exact(name: &str, n: usize, plan: &Plan, device: Device) -> (u64, u64) {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let spec = zoo::entry(name).unwrap().small;
    let mut model = zoo::build(name, &spec, device, 0).unwrap();
    model.apply_plan(plan).unwrap();
    let mut trainer = Trainer::new(Box::new(Sgd::new(&model, sgd()).unwrap()), 0);
    let input = Tensor::zeros(spec.input_dims(n), DType::F32, device, MemoryKind::Input).unwrap();
    let labels = Tensor::zeros([n], DType::I64, device, MemoryKind::Input).unwrap();
    let base = tracker.current_bytes();
    trainer
        .step(
            &model,
            &Batch {
                input,
                target: Target::Labels(labels),
            },
            StepOptions::default(),
        )
        .unwrap();
    (tracker.peak_bytes(), base)
}

fn cost(name: &str, n: usize) -> CostModel {
    CostModel::from_workload(&Workload::zoo_small(name, n).unwrap(), Throughput::cpu_default()).unwrap()
}

fn meta_model(name: &str, device: Device) -> Model {
    let spec = zoo::entry(name).unwrap().small;
    zoo::build(name, &spec, device, 0).unwrap()
}

/// Meta of a GPU, whose host memory is separate: the chain model offers offloading there.
const GPU: Device = Device::Meta(memopt_core::Target::Cuda);

/// The site at `path` in the tree under `site`.
fn find<'a>(site: &'a Site, path: &str) -> Option<&'a Site> {
    if site.path == path && site.run.is_none() {
        return Some(site);
    }
    site.parts.iter().find_map(|p| find(p, path))
}

/// Whether `entry`'s segment reads its saved input bit-packed, one time step at a time: it is
/// checkpointed with BitSpike, its input is spikes and its first layer (in registration order,
/// which is forward order in the zoo) is a convolution or a linear layer.
fn reads_packed(model: &Model, root: &Site, entry: &PlanEntry) -> bool {
    if entry.policy.compressor() != Some(CompressorKind::BitSpike) {
        return false;
    }
    let (Some(site), Some(module)) = (find(root, &entry.path), model.module(&entry.path)) else {
        return false;
    };
    let (input, mut layer) = match entry.children {
        Some([start, end]) => (&site.parts[start].inputs[0], module.children_in(start, end)[0].1),
        None => (&site.inputs[0], module),
    };
    while let Some((_, first)) = layer.children().into_iter().next() {
        layer = first;
    }
    input.is_spike && matches!(layer.type_name(), "Conv2d" | "Linear")
}

/// Whether `entry`'s segment keeps its saved input as spike counts: checkpointed with a binary
/// compressor, and its input pooled spikes (an average pooling of spikes).
fn keeps_counts(root: &Site, entry: &PlanEntry) -> bool {
    let binary = entry.policy.compressor().is_some_and(|c| c.requires_binary());
    let Some(site) = find(root, &entry.path) else {
        return false;
    };
    let input = match entry.children {
        Some([start, _]) => site.chain().get(start).and_then(|s| s.inputs.first()),
        None => site.inputs.first(),
    };
    binary && input.is_some_and(|x| x.pooled_spike_window.is_some())
}

/// Whether the segment of a plan entry contains a BatchNorm.
fn contains_batch_norm(model: &Model, e: &PlanEntry) -> bool {
    let paths: Vec<ModulePath> = match e.children {
        None => vec![ModulePath::from(e.path.as_str())],
        Some([start, end]) => find_module(model.root(), &e.path)
            .map(|m| m.children_in(start, end))
            .unwrap_or_default()
            .into_iter()
            .map(|(name, _)| ModulePath::from(e.path.as_str()).child(&name))
            .collect(),
    };
    model
        .modules()
        .iter()
        .filter(|m| m.type_name.starts_with("BatchNorm"))
        .any(|m| {
            paths
                .iter()
                .any(|p| ModulePath::from(m.path.as_str()).is_under(p))
        })
}

fn check(name: &str, n: usize, samples: usize) {
    check_on(name, n, samples, Device::META);
}

/// [`check`] on Meta `device`: on Meta of a GPU the chain offers offloading, and sampled plans
/// offload (chunked too); on Meta of the CPU it offers none. Both steps: the update in backward
/// (the planners' default) and the update after backward.
fn check_on(name: &str, n: usize, samples: usize, device: Device) {
    check_step(name, n, samples, device, true);
    check_step(name, n, samples, device, false);
}

fn check_step(name: &str, n: usize, samples: usize, device: Device, update_in_backward: bool) {
    let store_all = Plan {
        update_in_backward,
        ..Plan::store_all()
    };
    let (store_peak, base) = exact(name, n, &store_all, device);
    let model = meta_model(name, device);
    let input = Tensor::zeros(model.spec().input_dims(n), DType::F32, device, MemoryKind::Input).unwrap();
    let root = discover(&model, &input).unwrap();
    let space = OptionSpace {
        update_in_backward,
        ..OptionSpace::default()
    };
    let chain = chain_model(&model, &root, n, base, &space, &cost(name, n)).unwrap();
    let store: Vec<Chosen<'_>> = chain.pick_plan(&mut |_| 0);
    assert!(plan_entries(&store).is_empty());
    assert_eq!(
        chain.peak(&store).unwrap(),
        store_peak,
        "{name}: store (update in backward: {update_in_backward})"
    );
    // Plans drawn at random from the (huge) plan space, with a fixed seed.
    let mut rng = Philox::new(7);
    let mut pick = |n: usize| (rng.next_uniform() * n as f32) as usize % n;
    let (mut checked_entries, mut chunked, mut runs, mut chunked_bn) = (0, 0, 0, 0);
    let (mut runs_into_next, mut chunked_into_next, mut counts) = (0, 0, 0);
    let (mut offloaded, mut chunked_offloaded, mut sparse, mut kept_inputs) = (0, 0, 0, 0);
    let (mut packed, mut stored_packed, mut chunked_bn_packed, mut stored_packed_bn) = (0, 0, 0, 0);
    for _ in 0..samples {
        let p = chain.pick_plan(&mut pick);
        let entries = plan_entries(&p);
        let (peak, _) = exact(
            name,
            n,
            &Plan {
                update_in_backward,
                version: 1,
                entries: entries.clone(),
            },
            device,
        );
        assert_eq!(
            ChainModel::peak(&chain, &p).unwrap(),
            peak,
            "{name}: {entries:?} (update in backward: {update_in_backward})"
        );
        checked_entries += entries.len();
        offloaded += entries.iter().filter(|e| e.policy.offloads()).count();
        chunked_offloaded += entries
            .iter()
            .filter(|e| e.policy.offloads() && e.policy.chunks() > 1)
            .count();
        chunked += entries.iter().filter(|e| e.policy.chunks() > 1).count();
        sparse += entries
            .iter()
            .filter(|e| matches!(e.policy.boundaries(), ChunkBoundaries::KeptEvery(_)))
            .count();
        kept_inputs += entries
            .iter()
            .filter(|e| e.policy.batch_norm_inputs() == BatchNormInputs::Kept)
            .count();
        chunked_bn += entries
            .iter()
            .filter(|e| e.policy.chunks() > 1 && contains_batch_norm(&model, e))
            .count();
        runs += entries.iter().filter(|e| e.children.is_some()).count();
        runs_into_next += entries.iter().filter(|e| e.into_next > 0).count();
        chunked_into_next += entries
            .iter()
            .filter(|e| e.into_next > 0 && e.policy.chunks() > 1)
            .count();
        packed += entries.iter().filter(|e| reads_packed(&model, &root, e)).count();
        counts += entries.iter().filter(|e| keeps_counts(&root, e)).count();
        stored_packed += entries.iter().filter(|e| e.policy == Policy::StorePacked).count();
        // The mechanisms composed: a chunked segment with training BatchNorm that reads its
        // input packed, and layers around a BatchNorm keeping their spike inputs packed.
        chunked_bn_packed += entries
            .iter()
            .filter(|e| {
                e.policy.chunks() > 1 && contains_batch_norm(&model, e) && reads_packed(&model, &root, e)
            })
            .count();
        stored_packed_bn += entries
            .iter()
            .filter(|e| e.policy == Policy::StorePacked && contains_batch_norm(&model, e))
            .count();
    }
    assert!(
        stored_packed > 0,
        "{name}: some sampled plans store layers' spike inputs packed"
    );
    assert!(
        packed > 0,
        "{name}: some sampled plans checkpoint a segment that reads its input packed"
    );
    assert!(
        checked_entries >= samples / 2,
        "{name}: the sampled plans assign policies ({checked_entries})"
    );
    assert!(chunked > 0, "{name}: some sampled plans chunk time");
    // Every m-th boundary kept, where a segment takes 3 chunks or more.
    let offers_sparse = format!("{:?}", chain.nodes).contains("KeptEvery");
    assert!(
        sparse > 0 || !offers_sparse,
        "{name}: some sampled plans keep every m-th chunk boundary only"
    );
    // BatchNorm inputs kept for the forward's later passes, where a segment may keep them.
    let offers_kept_inputs = format!("{:?}", chain.nodes).contains("batch_norm_inputs: Kept");
    assert!(
        kept_inputs > 0 || !offers_kept_inputs,
        "{name}: some sampled plans keep a chunked segment's BatchNorm inputs"
    );
    let has_bn = model
        .modules()
        .iter()
        .any(|m| m.type_name.starts_with("BatchNorm"));
    assert!(
        chunked_bn > 0 || !has_bn,
        "{name}: some sampled plans chunk segments with training BatchNorm"
    );
    assert!(
        chunked_bn_packed > 0 || !has_bn,
        "{name}: some sampled plans chunk a segment with training BatchNorm that reads its input packed"
    );
    assert!(
        stored_packed_bn > 0 || !has_bn,
        "{name}: some sampled plans store packed around a BatchNorm"
    );
    // Runs going on into a block's pool (the CIFAR10-DVS VGG's blocks 2, 4 and 6).
    let has_into_next = format!("{:?}", chain.nodes).contains("into_next: 1");
    assert_eq!(has_into_next, name == "cifar10dvs-vgg", "{name}");
    assert!(
        (runs_into_next > 0 && chunked_into_next > 0) || !has_into_next,
        "{name}: some sampled plans run into the next child's pool, some of them in time chunks"
    );
    // Segments keeping an average pool's output as spike counts (the VGG's blocks 2, 4, 6).
    assert!(
        counts > 0 || name != "cifar10dvs-vgg",
        "{name}: some sampled plans keep a pooled input as spike counts"
    );
    let offers_offload = format!("{:?}", chain.nodes).contains("Offload");
    assert_eq!(offers_offload, device.has_separate_host(), "{name} on {device}");
    assert!(
        (offloaded > 0 && chunked_offloaded > 0) || !offers_offload,
        "{name}: some sampled plans offload, some of them in time chunks"
    );
    let has_runs = format!("{:?}", chain.nodes).contains("children: Some");
    assert!(
        runs > 0 || !has_runs,
        "{name}: some sampled plans checkpoint runs of children"
    );
}

#[test]
fn chain_model_is_exact_on_the_mlp() {
    check("spiking-mlp", 3, 200);
}

#[test]
fn chain_model_is_exact_on_toy_if() {
    check("toy-if", 4, 200);
}

#[test]
fn chain_model_is_exact_on_the_cifar10dvs_vgg() {
    check("cifar10dvs-vgg", 2, 600);
}

#[test]
fn chain_model_is_exact_on_the_cifar10dvs_vgg_for_a_gpu() {
    check_on("cifar10dvs-vgg", 2, 300, GPU);
}

#[test]
fn chain_model_is_exact_on_toy_if_for_a_gpu() {
    check_on("toy-if", 4, 200, GPU);
}

#[test]
fn chain_model_is_exact_on_the_resnets() {
    check("sew-resnet18", 2, 60);
    check("spiking-resnet18", 2, 60);
}

#[test]
fn chain_model_is_exact_on_vgg11() {
    check("spiking-vgg11-bn", 1, 400);
}

#[test]
fn plans_map_back_onto_the_chain() {
    let model = meta_model("cifar10dvs-vgg", Device::META);
    let input = Tensor::zeros(
        model.spec().input_dims(2),
        DType::F32,
        Device::META,
        MemoryKind::Input,
    )
    .unwrap();
    let root = discover(&model, &input).unwrap();
    let chain = chain_model(
        &model,
        &root,
        2,
        0,
        &OptionSpace::default(),
        &cost("cifar10dvs-vgg", 2),
    )
    .unwrap();
    let mut rng = Philox::new(3);
    let mut pick = |n: usize| (rng.next_uniform() * n as f32) as usize % n;
    for _ in 0..200 {
        let p = chain.pick_plan(&mut pick);
        let plan = Plan {
            update_in_backward: false,
            version: 1,
            entries: plan_entries(&p),
        };
        let back = chain.select(&plan).expect("every chain plan maps back");
        assert_eq!(
            chain.peak(&back).unwrap(),
            chain.peak(&p).unwrap(),
            "{}",
            plan.to_json()
        );
    }
    // Nested policies are outside the chain's plan space.
    let nested = Plan::from_entries([
        ("features.2", memopt_checkpoint::Policy::CHECKPOINT),
        ("features.2.neuron", memopt_checkpoint::Policy::CHECKPOINT),
    ]);
    assert!(chain.select(&nested).is_none());
}
