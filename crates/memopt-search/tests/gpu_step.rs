//! A whole training step of every zoo model on the GPU: gradients within 1e-4 relative of the
//! CPU's; under random plans (checkpoints, chunks, runs of children) gradients, BatchNorm
//! running statistics and final neuron states bit-identical to the GPU's store-everything step;
//! the peak of Meta with the CUDA target equal to the GPU tracker's peak, to the byte. Each test
//! skips with the reason when there is no GPU, and fails under MEMOPT_REQUIRE_GPU=1.

use memopt_checkpoint::module::{
    BatchNorm, Conv2d, Dropout, Flatten, Init, Linear, Neuron, Pool2d, Sequential,
};
use memopt_checkpoint::{InputSpec, Model, Plan, StepOptions, zoo};
use memopt_core::cuda::gpu_or_skip;
use memopt_core::kernels::{Conv2dParams, NeuronConfig, NeuronKind, Surrogate};
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
    /// The batch's input, the time-averaged output, the loss and the input gradient (in this
    /// order), to tell a forward difference from a backward one.
    io: Vec<(String, Vec<f32>)>,
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
        keep_output: true,
        input_grad: true,
        ..StepOptions::default()
    };
    let input = host_values(&batch.input, device);
    let out = trainer.step(&model, &batch, opts).unwrap();
    let peak = tracker.peak_bytes();
    let host = |t: &Tensor| host_values(t, device);
    let grads = out.grads.as_ref().unwrap();
    let io = vec![
        ("input".to_string(), input),
        (
            "output".to_string(),
            out.output.as_ref().map(host).unwrap_or_default(),
        ),
        ("loss".to_string(), out.loss.into_iter().collect()),
        (
            "input gradient".to_string(),
            out.input_grad.as_ref().map(host).unwrap_or_default(),
        ),
    ];
    Step {
        peak,
        io,
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

/// Differences below this are accepted whatever the values' magnitude (see `first_mismatch`);
/// gradients of the models here are 1e-6 or larger.
const ABSOLUTE_FLOOR: f64 = 1e-9;

/// The host values of `t` (none on Meta).
fn host_values(t: &Tensor, device: Device) -> Vec<f32> {
    if device.is_meta() {
        Vec::new()
    } else {
        t.to_vec_f32().unwrap()
    }
}

/// The first element of `c` vs `g` outside `rel` relative error (or `rel` times the largest
/// magnitude of `c`), with the count of such elements.
fn first_mismatch(c: &[f32], g: &[f32], rel: f64) -> Option<String> {
    if c.len() != g.len() {
        return Some(format!("lengths {} vs {}", c.len(), g.len()));
    }
    // Values that are zero in exact arithmetic (the bias gradient of a convolution before a
    // training-mode BatchNorm) come out as cancellation noise of about 1e-12 whose sign depends
    // on the GEMMs' summation order: differences below ABSOLUTE_FLOOR are accepted.
    let floor = (c.iter().fold(0f64, |m, v| m.max(v.abs() as f64)) * rel).max(ABSOLUTE_FLOOR);
    let bad = |(&a, &b): (&f32, &f32)| {
        let err = (a as f64 - b as f64).abs();
        !(err <= rel * (a as f64).abs() || err <= floor)
    };
    let i = c.iter().zip(g).position(bad)?;
    let count = c.iter().zip(g).filter(|p| bad(*p)).count();
    Some(format!(
        "[{i}]: cpu {} gpu {} ({count} of {} elements differ)",
        c[i],
        g[i],
        c.len()
    ))
}

/// Asserts every tensor of `gpu` is within `rel` of `cpu`'s; the message lists every tensor
/// that is not (its first differing element), so one failure shows where a step diverges.
fn assert_close(what: &str, cpu: &[(String, Vec<f32>)], gpu: &[(String, Vec<f32>)], rel: f64) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: count");
    let bad: Vec<String> = cpu
        .iter()
        .zip(gpu)
        .filter_map(|((path, c), (_, g))| first_mismatch(c, g, rel).map(|m| format!("  {path}{m}")))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} tensors differ beyond relative tolerance {rel}:\n{}",
        bad.len(),
        cpu.len(),
        bad.join("\n")
    );
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

/// The store-everything step of `workload` on the GPU, checked against the CPU's (within 1e-4)
/// and against Meta of the CUDA target (the peak, to the byte).
fn gpu_step_like_the_cpu(name: &str, workload: &Workload) -> Step {
    let store = Plan::store_all();
    let cpu = step(workload, &store, Device::Cpu);
    let gpu = step(workload, &store, GPU);
    let meta = step(workload, &store, GPU.meta());
    // One assertion over all of them, so that a failure lists every tensor that differs.
    let all = |s: &Step| [s.io.clone(), s.grads.clone(), s.buffers.clone()].concat();
    assert_close(
        &format!("{name} input, output, loss, input gradient, gradients, running statistics"),
        &all(&cpu),
        &all(&gpu),
        1e-4,
    );
    assert_eq!(
        meta.peak, gpu.peak,
        "{name}: Meta (CUDA target) peak vs GPU tracker peak (bytes)"
    );
    gpu
}

fn check_model(name: &str, n: usize, plans: usize) {
    let workload = Workload::zoo_small(name, n).unwrap();
    let gpu = gpu_step_like_the_cpu(name, &workload);
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

/// Runs `check` on every item, even after one fails, and fails listing every failure (so one
/// run on a GPU machine shows all that differ).
fn check_each<T>(items: &[T], label: impl Fn(&T) -> String, check: impl Fn(&T)) {
    let failed: Vec<String> = items
        .iter()
        .filter_map(|item| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(item)));
            result.err().map(|e| {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                format!("{}: {msg}", label(item))
            })
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed:\n{}",
        failed.len(),
        items.len(),
        failed.join("\n")
    );
}

/// The LIF of the CIFAR10-DVS VGG (SpikingJelly's example): tau 1.333 without decay of the
/// input, hard reset, detached reset, ATan surrogate.
fn vgg_lif() -> NeuronConfig {
    NeuronConfig {
        kind: NeuronKind::Lif {
            tau: 1.333,
            decay_input: false,
        },
        detach_reset: true,
        surrogate: Surrogate::ATan { alpha: 2.0 },
        ..NeuronConfig::lif(1.333)
    }
}

/// One piece of the zoo's layer combinations: its name, whether its input is spikes, and the
/// layers before the head (each given `Init`), with the head's input features.
type Piece = (&'static str, bool, fn(&mut Init) -> (Sequential, usize));

/// Small models on `[T=4, N=2, 2, 16, 16]` inputs, each one combination of layers from the zoo
/// (the CIFAR10-DVS VGG's block, pooling and dropouts), with a head of flatten, an optional
/// dropout and a linear layer to 10 classes.
fn pieces() -> Vec<Piece> {
    fn conv(init: &mut Init, cin: usize, cout: usize) -> Conv2d {
        let p = Conv2dParams {
            padding: [1, 1],
            ..Conv2dParams::default()
        };
        Conv2d::new(init, cin, cout, 3, p, true).unwrap()
    }
    vec![
        ("conv", true, |i| (Sequential::new().push(conv(i, 2, 8)), 8 * 256)),
        ("conv on values", false, |i| {
            (Sequential::new().push(conv(i, 2, 8)), 8 * 256)
        }),
        ("conv-bn", true, |i| {
            let s = Sequential::new()
                .push(conv(i, 2, 8))
                .push(BatchNorm::new_2d(i, 8).unwrap());
            (s, 8 * 256)
        }),
        ("lif (VGG)", true, |i| {
            (
                Sequential::new().push(Neuron::new(i, vgg_lif(), 2.0).unwrap()),
                2 * 256,
            )
        }),
        ("conv-bn-lif (VGG block)", true, |i| {
            let s = Sequential::new()
                .push(conv(i, 2, 8))
                .push(BatchNorm::new_2d(i, 8).unwrap())
                .push(Neuron::new(i, vgg_lif(), 2.0).unwrap());
            (s, 8 * 256)
        }),
        ("avg-pool", true, |_| {
            (Sequential::new().push(Pool2d::avg(2, 2, 0)), 2 * 64)
        }),
        ("max-pool", true, |_| {
            (Sequential::new().push(Pool2d::max(2, 2, 0)), 2 * 64)
        }),
        ("VGG block, avg-pool, VGG block", true, |i| {
            let s = Sequential::new()
                .push(conv(i, 2, 8))
                .push(BatchNorm::new_2d(i, 8).unwrap())
                .push(Neuron::new(i, vgg_lif(), 2.0).unwrap())
                .push(Pool2d::avg(2, 2, 0))
                .push(conv(i, 8, 8))
                .push(BatchNorm::new_2d(i, 8).unwrap())
                .push(Neuron::new(i, vgg_lif(), 2.0).unwrap());
            (s, 8 * 64)
        }),
    ]
}

/// The model of `piece` with `dropout` in its head: `Some(true)` a mask per element (the VGG's
/// classifier), `Some(false)` one mask shared by the time steps.
fn piece_model(piece: &Piece, dropout: Option<bool>, device: Device, seed: u64) -> Model {
    let (name, spikes, body) = *piece;
    let mut init = Init::new(device, seed);
    let (features, width) = body(&mut init);
    let mut head = Sequential::new().push(Flatten::new(2));
    head = match dropout {
        Some(true) => head.push(Dropout::per_element(0.25)),
        Some(false) => head.push(Dropout::new(0.25)),
        None => head,
    };
    head = head.push(Linear::new(&mut init, width, 10, true).unwrap());
    let root = Sequential::new()
        .push_named("features", features)
        .push_named("head", head);
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 16, 16],
        classes: 10,
    };
    Model::new(name, Box::new(root), spec, device).with_spike_input(spikes)
}

#[test]
fn pieces_of_the_zoo_step_on_the_gpu_like_the_cpu() {
    if !gpu_or_skip("pieces_of_the_zoo_step_on_the_gpu_like_the_cpu") {
        return;
    }
    let mut cases: Vec<(Piece, Option<bool>)> = pieces().into_iter().map(|p| (p, None)).collect();
    let first = pieces()[0];
    cases.push((first, Some(true)));
    cases.push((first, Some(false)));
    let label = |(p, d): &(Piece, Option<bool>)| format!("{} (head dropout {d:?})", p.0);
    check_each(&cases, label, |&(piece, dropout)| {
        let workload = Workload::custom(
            piece.0,
            move |device, seed| Ok(piece_model(&piece, dropout, device, seed)),
            2,
        );
        gpu_step_like_the_cpu(piece.0, &workload);
    });
}

#[test]
fn every_zoo_model_steps_on_the_gpu_like_the_cpu_and_plans_are_exact() {
    if !gpu_or_skip("every_zoo_model_steps_on_the_gpu_like_the_cpu_and_plans_are_exact") {
        return;
    }
    check_each(
        &zoo::entries(),
        |e| e.name.to_string(),
        |e| check_model(e.name, 2, 4),
    );
}
