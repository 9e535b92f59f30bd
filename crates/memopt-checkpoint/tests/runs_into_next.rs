//! Runs that go on into the next child (`PlanEntry::into_next`): on the CIFAR10-DVS VGG, block
//! 2's `proj_bn` starts with an average pool, so `features` children `[1, 2]` with
//! `into_next: 1` is block 1 and that pool as one segment. Its backward receives the pooled
//! gradient (a quarter of block 1's output) and expands it one time chunk at a time, so the
//! whole gradient of block 1's output never exists. The runs are exact (loss, gradients,
//! running statistics, states and updated parameters bit-identical to storing everything;
//! Meta's peaks equal the CPU's), the next child runs its remaining links under their own
//! policies, and plans that the split child would leave ambiguous are rejected with the reason.

mod common;

use common::{batch, entry, plan_of as plan, step_recorded, trainer};
use memopt_checkpoint::zoo;
use memopt_checkpoint::{ChunkBoundaries, Model, Plan, PlanEntry, Policy, StepOptions};
use memopt_compress::CompressorKind;
use memopt_core::memory::MemoryAction;
use memopt_core::{Device, MemoryKind};

/// The VGG at T = 4 on 2x32x32 samples (the mechanism does not depend on the size).
fn dvs_vgg(d: Device) -> Model {
    let mut spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
    spec.sample = vec![2, 32, 32];
    zoo::build("cifar10dvs-vgg", &spec, d, 1).unwrap()
}

fn run_into(path: &str, children: [usize; 2], into_next: usize, policy: Policy) -> PlanEntry {
    entry(path, Some(children), into_next, policy)
}

fn module(path: &str, policy: Policy) -> PlanEntry {
    entry(path, None, 0, policy)
}

fn chunked(chunks: usize) -> Policy {
    Policy::checkpoint(CompressorKind::BitSpike, chunks)
}

/// The sizes of the gradients one step under `plan` on `device` allocates (bytes).
fn gradients(plan: &Plan, device: Device, n: usize) -> Vec<u64> {
    let recorder = step_recorded(dvs_vgg, plan, device, n).1;
    let events = recorder.0.lock().unwrap();
    events
        .iter()
        .filter(|e| e.0 == MemoryAction::Alloc && e.2 == MemoryKind::Gradient)
        .map(|e| e.1)
        .collect()
}

fn assert_exact_and_meta_matches_cpu(p: &Plan, n: usize) {
    common::assert_exact_and_meta_matches_cpu(dvs_vgg, p, n);
}

/// Bytes of block 1's output at T = 4, batch `n`: 128 channels at 32x32, f32.
fn block1_output_bytes(n: u64) -> u64 {
    4 * n * 128 * 32 * 32 * 4
}

#[test]
fn a_chunked_run_into_the_next_pool_never_holds_the_whole_gradient_of_its_last_block() {
    let n = 2;
    // Block 1 in 4 time chunks, then the rest of block 2 (convolution, BatchNorm, neuron) as a
    // run: without `into_next` block 2's pool hands block 1 the whole gradient of its output.
    let rest = run_into("features.2", [1, 4], 0, Policy::CHECKPOINT);
    let apart = plan(vec![module("features.1", chunked(4)), rest.clone()]);
    let into = plan(vec![run_into("features", [1, 2], 1, chunked(4)), rest]);
    assert_exact_and_meta_matches_cpu(&into, n);
    let whole = block1_output_bytes(n as u64);
    let apart_grads = gradients(&apart, Device::META, n);
    let into_grads = gradients(&into, Device::META, n);
    assert!(apart_grads.contains(&whole), "{apart_grads:?}");
    assert!(!into_grads.contains(&whole), "{into_grads:?}");
    // Each chunk expands its own time step of the pooled gradient (T = 4, 4 chunks).
    assert!(into_grads.contains(&(whole / 4)), "{into_grads:?}");
}

#[test]
fn runs_into_the_next_child_compose_with_policies_and_every_pooled_block() {
    let replayed = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 4,
        boundaries: ChunkBoundaries::Replayed,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let p = plan(vec![
        // Blocks 0-1 and block 2's pool, unchunked, with block 1's BatchNorm checkpointed inside.
        run_into("features", [0, 2], 1, Policy::CHECKPOINT),
        module("features.1.proj_bn.1", Policy::CHECKPOINT),
        // Block 2's remaining links stored packed, one by one.
        module("features.2.proj_bn.1", Policy::StorePacked),
        // Block 3 and block 4's pool and convolution, chunked with replayed boundaries.
        run_into("features", [3, 4], 2, replayed),
        // Block 4's BatchNorm and neuron as a run of its own.
        run_into("features.4", [2, 4], 0, chunked(2)),
        // Block 5 and block 6's pool.
        run_into("features", [5, 6], 1, chunked(2)),
    ]);
    assert_exact_and_meta_matches_cpu(&p, 1);
}

#[test]
fn plans_a_split_child_would_leave_ambiguous_are_rejected_and_the_model_keeps_its_plan() {
    let mut model = dvs_vgg(Device::META);
    let before = plan(vec![module("features.1", Policy::CHECKPOINT)]);
    model.apply_plan(&before).unwrap();
    let into = |entries: Vec<PlanEntry>| {
        let mut all = vec![run_into("features", [1, 2], 1, Policy::CHECKPOINT)];
        all.extend(entries);
        plan(all)
    };
    let cases: Vec<(Plan, &str)> = vec![
        (
            into(vec![module("features.2", Policy::CHECKPOINT)]),
            "covers the first 1 link(s) of 'features.2', so 'features.2' no longer runs whole",
        ),
        (
            into(vec![run_into("features.2", [0, 2], 0, Policy::CHECKPOINT)]),
            "must start at link 1 or later",
        ),
        (
            into(vec![run_into("features", [2, 4], 0, Policy::CHECKPOINT)]),
            "features[2..4] overlaps features[1..2]+next[0..1]",
        ),
        (
            // Block 2's pool and convolution: part of its inlined proj_bn.
            plan(vec![
                run_into("features", [1, 2], 2, Policy::CHECKPOINT),
                module("features.2.proj_bn", Policy::CHECKPOINT),
            ]),
            "covers part of 'features.2.proj_bn'",
        ),
        (
            plan(vec![run_into("features", [1, 2], 4, Policy::CHECKPOINT)]),
            "\"into_next\" 4 covers all 4 links of the next child '2'; valid: 1..=3",
        ),
        (
            plan(vec![run_into("features", [7, 9], 1, Policy::CHECKPOINT)]),
            "needs a child after the run, but the run ends at the last of the 9 links",
        ),
        (
            plan(vec![run_into("", [0, 1], 1, Policy::CHECKPOINT)]),
            "the next child 'flatten' (Flatten) does not run its children as a chain",
        ),
        (
            plan(vec![run_into("features.2", [0, 2], 1, Policy::CHECKPOINT)]),
            "belongs to a child that VGGBlock inlines",
        ),
        (
            plan(vec![PlanEntry {
                into_next: 1,
                ..module("features.1", Policy::CHECKPOINT)
            }]),
            "give \"children\" too",
        ),
    ];
    for (bad, expected) in cases {
        let err = model.apply_plan(&bad).unwrap_err().to_string();
        assert!(err.contains(expected), "{expected:?} not in: {err}");
        assert_eq!(model.plan(), before.clone());
    }
}

/// A block that claims to run its children as a chain through `Cx::call_children` but calls
/// them itself: a run going on into it cannot run part of its chain.
struct CallsItsOwnChildren {
    a: memopt_checkpoint::module::Linear,
    b: memopt_checkpoint::module::Linear,
}

impl memopt_checkpoint::module::Module for CallsItsOwnChildren {
    fn type_name(&self) -> &'static str {
        "CallsItsOwnChildren"
    }

    fn forward<'m>(
        &'m self,
        cx: &mut memopt_checkpoint::Cx<'m>,
        inputs: Vec<memopt_checkpoint::Var>,
    ) -> memopt_checkpoint::Forward<Vec<memopt_checkpoint::Var>> {
        let xs = cx.call("a", &self.a, inputs)?;
        cx.call("b", &self.b, xs)
    }

    fn children(&self) -> Vec<(String, &dyn memopt_checkpoint::module::Module)> {
        vec![("a".into(), &self.a), ("b".into(), &self.b)]
    }
}

impl memopt_checkpoint::module::PlannerHints for CallsItsOwnChildren {
    fn children_form_chain(&self) -> bool {
        true
    }

    fn supports_child_ranges(&self) -> bool {
        true
    }
}

#[test]
fn a_run_into_a_child_that_does_not_run_its_chain_fails_with_the_reason() {
    use memopt_checkpoint::module::{Init, Linear, Sequential};
    let device = Device::Cpu;
    let mut init = Init::new(device, 3);
    let root = Sequential::new()
        .push_named("first", Linear::new(&mut init, 4, 4, true).unwrap())
        .push_named(
            "block",
            CallsItsOwnChildren {
                a: Linear::new(&mut init, 4, 4, true).unwrap(),
                b: Linear::new(&mut init, 4, 3, true).unwrap(),
            },
        );
    let spec = memopt_checkpoint::InputSpec {
        time_steps: 2,
        sample: vec![4],
        classes: 3,
    };
    let mut model = Model::new("calls-its-own", Box::new(root), spec, device);
    model
        .apply_plan(&plan(vec![run_into("", [0, 1], 1, Policy::CHECKPOINT)]))
        .unwrap();
    let mut trainer = trainer(&model);
    let err = trainer
        .step(&model, &batch(&model, 2, 0), StepOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("block")
            && err.contains("its forward did not, so part of its chain cannot run on its own"),
        "{err}"
    );
}
