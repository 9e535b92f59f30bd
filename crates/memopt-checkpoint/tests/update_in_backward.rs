//! The update in backward (`Plan::update_in_backward`): each parameter is updated as soon as no
//! op still to run in backward reads it, and its gradient is freed there. The updated
//! parameters must be bit-identical to the update after backward, under any memory policy and
//! optimizer, and no gradient may outlive the backward op that finished it.

mod common;

use common::{Recorder, batch, entry, plan_of, tiny_conv_snn, zoo_small};
use memopt_checkpoint::optim::{Adam, Optimizer};
use memopt_checkpoint::{ChunkBoundaries, Model, Plan, Policy, StepOptions, Trainer};
use memopt_compress::CompressorKind;
use memopt_core::kernels::AdamConfig;
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
