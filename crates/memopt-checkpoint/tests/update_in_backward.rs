//! The update in backward (`Plan::update_in_backward`): each parameter is updated as soon as no
//! op still to run in backward reads it, and its gradient is freed there. The updated
//! parameters must be bit-identical to the update after backward, under any memory policy and
//! optimizer, and no gradient may outlive the backward op that finished it.

mod common;

use common::{Recorder, batch, entry, plan_of, tiny_conv_snn, zoo_small};
use memopt_checkpoint::Forward;
use memopt_checkpoint::module::{BatchNorm, Init, Linear, Neuron, PlannerHints, Sequential};
use memopt_checkpoint::optim::{Adam, Optimizer};
use memopt_checkpoint::{
    ChunkBoundaries, Cx, InputSpec, Model, Module, Param, Plan, PlanEntry, Policy, StepOptions, Trainer, Var,
    ops,
};
use memopt_compress::CompressorKind;
use memopt_core::kernels::AdamConfig;
use memopt_core::kernels::{NeuronConfig, NeuronKind};
use memopt_core::memory::{MemoryAction, Phase};
use memopt_core::{Device, MemoryKind, MemoryTracker};

fn sgd(model: &Model) -> Box<dyn Optimizer> {
    Box::new(common::sgd(model))
}

fn adam(model: &Model) -> Box<dyn Optimizer> {
    let cfg = AdamConfig {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 1e-4,
    };
    Box::new(Adam::new(model, cfg).unwrap())
}

type Bits = Vec<(String, Vec<u32>)>;

fn bits(t: &memopt_core::Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().into_iter().map(f32::to_bits).collect()
}

/// Parameters and optimizer state after three steps, and the last step's gradients (kept).
fn after_steps(model: &Model, optimizer: fn(&Model) -> Box<dyn Optimizer>) -> (Bits, Bits, Bits) {
    let mut trainer = Trainer::new(optimizer(model), 5);
    let opts = StepOptions {
        keep_grads: true,
        ..StepOptions::default()
    };
    let mut out = None;
    for s in 0..3 {
        out = Some(trainer.step(model, &batch(model, 3, s), opts).unwrap());
    }
    let grads = out.and_then(|o| o.grads).expect("gradients kept");
    let params = model.params();
    let g = params
        .iter()
        .map(|(p, param)| (p.clone(), grads.get(param.id()).map(bits).unwrap_or_default()))
        .collect();
    let v = params
        .iter()
        .map(|(p, param)| (p.clone(), bits(param.tensor())))
        .collect();
    let state = trainer
        .optimizer()
        .state_tensors()
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("state {i} ({})", s.name), bits(&s.tensor)))
        .collect();
    (g, v, state)
}

fn plans(model: &Model) -> Vec<Plan> {
    let chunked = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 2,
        boundaries: ChunkBoundaries::Kept,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let mut plans = vec![
        Plan::store_all(),
        Plan::from_entries([("block1", Policy::CHECKPOINT), ("head", Policy::CHECKPOINT)]),
        plan_of(vec![entry("", Some([0, 3]), 0, chunked)]),
        plan_of(vec![
            entry("", Some([0, 4]), 0, Policy::CHECKPOINT),
            entry("block2", None, 0, chunked),
        ]),
    ];
    for p in &mut plans {
        p.update_in_backward = true;
    }
    let run = memopt_checkpoint::RunShape {
        training: true,
        time_steps: Some(model.spec().time_steps),
    };
    for p in &plans {
        memopt_checkpoint::PolicyTable::from_plan(model.root(), p, run)
            .unwrap_or_else(|e| panic!("plan {} applies: {e}", p.to_json()));
    }
    plans
}

#[test]
fn updated_parameters_are_bit_identical_under_any_policy_and_optimizer() {
    for optimizer in [sgd as fn(&Model) -> Box<dyn Optimizer>, adam] {
        let baseline = after_steps(&tiny_conv_snn(Device::Cpu, 3, 3), optimizer);
        for plan in plans(&tiny_conv_snn(Device::Cpu, 3, 3)) {
            let mut model = tiny_conv_snn(Device::Cpu, 3, 3);
            model.apply_plan(&plan).unwrap();
            let got = after_steps(&model, optimizer);
            for (what, a, b) in [
                ("gradient", &got.0, &baseline.0),
                ("parameter", &got.1, &baseline.1),
                ("optimizer state", &got.2, &baseline.2),
            ] {
                for (x, y) in a.iter().zip(b) {
                    assert_eq!(x, y, "{what} {} under plan {}", x.0, plan.to_json());
                }
                assert_eq!(a.len(), b.len());
            }
        }
    }
}

/// Gradient bytes held when the optimizer phase of the step begins (after backward), and the
/// step's peak, on Meta.
fn gradients_after_backward(build: impl Fn() -> Model, plan: &Plan) -> (u64, u64) {
    let tracker = MemoryTracker::new(Device::META);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = build();
    model.apply_plan(plan).unwrap();
    let mut trainer = Trainer::new(sgd(&model), 1);
    let recorder = std::sync::Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    trainer
        .step(&model, &batch(&model, 4, 0), StepOptions::default())
        .unwrap();
    let mut held = 0i64;
    let mut after_backward = 0;
    for e in recorder.0.lock().unwrap().iter() {
        if e.2 == MemoryKind::Gradient {
            match e.0 {
                MemoryAction::Alloc => held += e.1 as i64,
                MemoryAction::Free => held -= e.1 as i64,
                _ => {}
            }
        }
        if e.4 == Phase::Backward {
            after_backward = held;
        }
    }
    (after_backward as u64, tracker.peak_bytes())
}

#[test]
fn no_gradient_outlives_backward_and_the_peak_drops_by_what_they_held() {
    let build = || zoo_small("cifar10dvs-vgg", Device::META, 0);
    let model = build();
    let grad_bytes: u64 = model.params().iter().map(|(_, p)| p.tensor().view_bytes()).sum();
    for mut plan in [
        Plan::store_all(),
        Plan::from_entries([
            ("features.0", Policy::CHECKPOINT),
            ("features.1", Policy::CHECKPOINT),
        ]),
    ] {
        let (held, peak) = gradients_after_backward(build, &plan);
        assert_eq!(
            held, grad_bytes,
            "after backward every gradient waits for the update"
        );
        plan.update_in_backward = true;
        let (held_fused, peak_fused) = gradients_after_backward(build, &plan);
        assert_eq!(
            held_fused,
            0,
            "each gradient is freed in backward: {}",
            plan.to_json()
        );
        assert!(
            peak_fused < peak,
            "the update in backward lowers the peak: {peak_fused} vs {peak} ({})",
            plan.to_json()
        );
    }
}

#[test]
fn plan_files_carry_the_update_in_backward_and_old_files_default_to_after() {
    let mut plan = Plan::from_entries([("block1", Policy::CHECKPOINT)]);
    assert!(!plan.to_json().contains("update_in_backward"), "absent when off");
    assert!(!Plan::from_json(&plan.to_json()).unwrap().update_in_backward);
    plan.update_in_backward = true;
    let read = Plan::from_json(&plan.to_json()).unwrap();
    assert!(read.update_in_backward);
    let mut model = tiny_conv_snn(Device::Cpu, 0, 2);
    model.apply_plan(&read).unwrap();
    assert_eq!(model.plan(), read, "the model's plan keeps it");
}

/// A linear layer whose weight is a clone (same id, same storage) of its parent's.
struct SharedLin {
    w: Param,
}
impl Module for SharedLin {
    fn type_name(&self) -> &'static str {
        "SharedLin"
    }
    fn forward<'m>(&'m self, cx: &mut Cx<'m>, mut inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = inputs.pop().unwrap();
        let t = x.dims()[0];
        let w = cx.param(&self.w);
        Ok(vec![ops::linear(cx, &x, &w, None, t)?])
    }
}

impl PlannerHints for SharedLin {}

struct Parent {
    w: Param,
    inner: Sequential,
    sn2: Neuron,
    head: Linear,
}
impl Module for Parent {
    fn type_name(&self) -> &'static str {
        "Parent"
    }
    fn forward<'m>(&'m self, cx: &mut Cx<'m>, mut inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = inputs.pop().unwrap();
        let t = x.dims()[0];
        let w = cx.param(&self.w);
        let a = ops::linear(cx, &x, &w, None, t)?;
        drop(w);
        let a = cx.call1("inner", &self.inner, a)?;
        let a = cx.call1("sn2", &self.sn2, a)?;
        let w = cx.param(&self.w);
        let a = ops::linear(cx, &a, &w, None, t)?;
        drop(w);
        Ok(vec![cx.call1("head", &self.head, a)?])
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("inner".into(), &self.inner as &dyn Module),
            ("sn2".into(), &self.sn2),
            ("head".into(), &self.head),
        ]
    }
    fn params(&self) -> Vec<(&'static str, &Param)> {
        vec![("w", &self.w)]
    }
}

impl PlannerHints for Parent {}

fn shared_model(t: usize) -> Model {
    let f = 6;
    let mut init = Init::new(Device::Cpu, 21);
    let w = init.uniform(&[f, f], 0.6).unwrap();
    let plif = NeuronConfig {
        kind: NeuronKind::Plif { decay_input: true },
        ..NeuronConfig::plif()
    };
    let inner = Sequential::new()
        .push_named("lin", SharedLin { w: w.clone() })
        .push_named("bn", BatchNorm::new_1d(&mut init, f).unwrap())
        .push_named("sn", Neuron::new(&mut init, plif, 3.0).unwrap());
    let root = Parent {
        w,
        inner,
        sn2: Neuron::lif(&mut init, 2.0).unwrap(),
        head: Linear::new(&mut init, f, 3, true).unwrap(),
    };
    let spec = InputSpec {
        time_steps: t,
        sample: vec![f],
        classes: 3,
    };
    Model::new("shared", Box::new(root), spec, Device::Cpu)
}

type Values = Vec<Vec<u32>>;

/// Gradients (when kept), parameters, optimizer state and losses of three steps.
fn run(
    model: &Model,
    opt: fn(&Model) -> Box<dyn Optimizer>,
    keep_grads: bool,
) -> (Values, Values, Values, Vec<u32>) {
    let mut trainer = Trainer::new(opt(model), 5);
    let opts = StepOptions {
        keep_grads,
        ..StepOptions::default()
    };
    let mut out = None;
    let mut losses = Vec::new();
    for s in 0..3 {
        let o = trainer.step(model, &batch(model, 3, s), opts).unwrap();
        losses.push(o.loss.unwrap().to_bits());
        out = Some(o);
    }
    let g = match out.and_then(|o| o.grads) {
        Some(g) => model
            .params()
            .iter()
            .map(|(_, p)| g.get(p.id()).map(bits).unwrap_or_default())
            .collect(),
        None => Vec::new(),
    };
    let p = model.params().iter().map(|(_, p)| bits(p.tensor())).collect();
    let s = trainer
        .optimizer()
        .state_tensors()
        .iter()
        .map(|s| bits(&s.tensor))
        .collect();
    (g, p, s, losses)
}

fn null_chunked(k: usize, b: ChunkBoundaries) -> Policy {
    Policy::Checkpoint {
        compressor: CompressorKind::Null,
        chunks: k,
        boundaries: b,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    }
}

/// Plans around the shared weight: checkpoints, chunked BatchNorm segments (kept and replayed
/// boundaries), nested segments, runs, offload.
fn shared_weight_plans() -> Vec<Vec<PlanEntry>> {
    use ChunkBoundaries::*;
    let off = |k, b| Policy::Offload {
        compressor: CompressorKind::Null,
        chunks: k,
        boundaries: b,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    vec![
        vec![],
        vec![entry(
            "inner",
            None,
            0,
            Policy::checkpoint(CompressorKind::Null, 1),
        )],
        vec![entry("inner", None, 0, Policy::StorePacked)],
        vec![entry("inner", None, 0, null_chunked(2, Replayed))],
        vec![entry("inner", None, 0, null_chunked(3, Kept))],
        vec![
            entry("inner", None, 0, null_chunked(2, Replayed)),
            entry("inner.lin", None, 0, Policy::checkpoint(CompressorKind::Null, 1)),
        ],
        vec![
            entry("inner", None, 0, null_chunked(2, Replayed)),
            entry("inner.bn", None, 0, null_chunked(2, Replayed)),
        ],
        vec![
            entry("inner", None, 0, null_chunked(4, Replayed)),
            entry("inner", Some([0, 2]), 0, null_chunked(2, Replayed)),
        ],
        vec![entry("inner", Some([0, 2]), 0, null_chunked(2, Replayed))],
        vec![
            entry("inner", None, 0, off(2, Replayed)),
            entry("inner.sn", None, 0, Policy::checkpoint(CompressorKind::Null, 1)),
        ],
        vec![
            entry("inner", None, 0, null_chunked(2, Kept)),
            entry("sn2", None, 0, null_chunked(2, Replayed)),
            entry("head", None, 0, Policy::checkpoint(CompressorKind::Null, 1)),
        ],
    ]
}

/// One weight read by a stored layer before and after a segment and by a layer inside it (a
/// clone, the same parameter): its last reader is the first layer's backward, after the
/// segment's recomputations, whatever the plan.
#[test]
fn a_weight_read_inside_and_outside_segments_is_updated_once_after_its_last_reader() {
    for opt in [sgd as fn(&Model) -> Box<dyn Optimizer>, adam] {
        let base = run(&shared_model(4), opt, true);
        for entries in shared_weight_plans() {
            for uib in [false, true] {
                for keep in [true, false] {
                    let mut plan = Plan {
                        entries: entries.clone(),
                        ..Plan::store_all()
                    };
                    plan.update_in_backward = uib;
                    let mut model = shared_model(4);
                    if let Err(e) = model.apply_plan(&plan) {
                        panic!("plan {} rejected: {e}", plan.to_json());
                    }
                    let got = run(&model, opt, keep);
                    let what = format!("plan {} keep_grads {keep}", plan.to_json());
                    assert_eq!(got.3, base.3, "loss {what}");
                    assert_eq!(got.1, base.1, "params {what}");
                    assert_eq!(got.2, base.2, "optimizer state {what}");
                    if keep {
                        assert_eq!(got.0, base.0, "grads {what}");
                    }
                }
            }
        }
    }
}

/// Two linear layers, weights `a` then `b`, and a head. The model lists `a` and, when `list_b`,
/// `b`: with `b` a clone of `a` (a tied weight) it lists one parameter under two paths; with
/// `b` its own parameter not listed, the model has a parameter it does not know of.
struct TwoReads {
    a: Param,
    b: Param,
    list_b: bool,
    head: Linear,
}

impl Module for TwoReads {
    fn type_name(&self) -> &'static str {
        "TwoReads"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, mut inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = inputs.pop().unwrap();
        let t = x.dims()[0];
        let w = cx.param(&self.a);
        let y = ops::linear(cx, &x, &w, None, t)?;
        let w = cx.param(&self.b);
        let y = ops::linear(cx, &y, &w, None, t)?;
        Ok(vec![cx.call1("head", &self.head, y)?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("head".into(), &self.head as &dyn Module)]
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        let mut p = vec![("a", &self.a)];
        if self.list_b {
            p.push(("b", &self.b));
        }
        p
    }
}

impl PlannerHints for TwoReads {}

fn two_reads(tied: bool, update_in_backward: bool) -> Model {
    let mut init = Init::new(Device::Cpu, 3);
    let a = init.uniform(&[4, 4], 0.5).unwrap();
    let b = if tied {
        a.clone()
    } else {
        init.uniform(&[4, 4], 0.5).unwrap()
    };
    let root = TwoReads {
        a,
        b,
        list_b: tied,
        head: Linear::new(&mut init, 4, 3, true).unwrap(),
    };
    let spec = InputSpec {
        time_steps: 2,
        sample: vec![4],
        classes: 3,
    };
    let mut model = Model::new("two-reads", Box::new(root), spec, Device::Cpu);
    let plan = Plan {
        update_in_backward,
        ..Plan::store_all()
    };
    model.apply_plan(&plan).unwrap();
    model
}

/// A tied weight (one parameter under two paths) is updated once, after backward as in
/// backward; a parameter the model does not list fails no step and is left alone either way.
#[test]
fn tied_and_unlisted_parameters_update_as_after_backward() {
    for tied in [true, false] {
        let after = run(&two_reads(tied, false), sgd, false);
        let in_backward = run(&two_reads(tied, true), sgd, false);
        assert_eq!(in_backward, after, "tied: {tied}");
    }
}
