//! Rejected plans and inputs are clear errors that name the problem, and change nothing.

mod common;

use common::{batch, fingerprint, tiny_conv_snn, trainer, zoo_small};
use memopt_checkpoint::module::{Dropout, Init, Linear, Neuron, Sequential};
use memopt_checkpoint::{Batch, CheckpointError, InputSpec, Model, Plan, Policy, StepOptions, Target};
use memopt_compress::CompressorKind;
use memopt_core::{DType, Device, MemoryKind, Tensor};

#[test]
fn unknown_paths_are_named_with_suggestions() {
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    let e = model
        .apply_plan(&Plan::from_entries([("block1.cnov", Policy::CHECKPOINT)]))
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, CheckpointError::UnknownPath { .. }), "{msg}");
    assert!(
        msg.contains("'block1.cnov'") && msg.contains("did you mean 'block1.conv'"),
        "{msg}"
    );
}

#[test]
fn chunks_beyond_the_time_steps_are_rejected() {
    let mut model = zoo_small("toy-if", Device::META, 0);
    let t = model.spec().time_steps;
    let p = Policy::checkpoint(CompressorKind::BitSpike, t + 1);
    let msg = model
        .apply_plan(&Plan::from_entries([("0", p)]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!(
            "{} chunks exceed the {t} time steps of the input (valid: 1..={t})",
            t + 1
        )),
        "{msg}"
    );
    let zero = Policy::checkpoint(CompressorKind::BitSpike, 0);
    let msg = model
        .apply_plan(&Plan::from_entries([("0", zero)]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("chunks must be at least 1"), "{msg}");
}

#[test]
fn replayed_boundaries_without_chunks_are_rejected_and_leave_the_plan_as_it_was() {
    let mut model = zoo_small("toy-if", Device::META, 0);
    let kept = Plan::from_entries([("0", Policy::checkpoint(CompressorKind::BitSpike, 2))]);
    model.apply_plan(&kept).unwrap();
    let p = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 1,
        boundaries: memopt_checkpoint::ChunkBoundaries::Replayed,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let msg = model
        .apply_plan(&Plan::from_entries([("0", p)]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("replayed boundaries need time chunks (chunks >= 2)"),
        "{msg}"
    );
    assert_eq!(model.plan(), kept);
    // Written and read back by plan files as `"boundaries": "replayed"`; omitted when kept.
    let replayed = Plan::from_entries([(
        "0",
        Policy::Checkpoint {
            compressor: CompressorKind::BitSpike,
            chunks: 2,
            boundaries: memopt_checkpoint::ChunkBoundaries::Replayed,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
    )]);
    let json = replayed.to_json();
    assert!(json.contains(r#""boundaries": "replayed""#), "{json}");
    assert!(!kept.to_json().contains("boundaries"));
    assert_eq!(Plan::from_json(&json).unwrap(), replayed);
    // Every m-th boundary kept: `{"kept_every": m}`, m at least 1.
    let every = |m| {
        Plan::from_entries([(
            "0",
            Policy::Checkpoint {
                compressor: CompressorKind::BitSpike,
                chunks: 2,
                boundaries: memopt_checkpoint::ChunkBoundaries::KeptEvery(m),
                batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
            },
        )])
    };
    let json = every(2).to_json();
    assert!(json.contains(r#""kept_every": 2"#), "{json}");
    assert_eq!(Plan::from_json(&json).unwrap(), every(2));
    model.apply_plan(&every(2)).unwrap();
    let msg = model.apply_plan(&every(0)).unwrap_err().to_string();
    assert!(msg.contains("\"kept_every\" must be at least 1"), "{msg}");
    assert_eq!(model.plan(), every(2), "a rejected plan changes nothing");
}

#[test]
fn chunking_a_segment_with_batch_norm_is_accepted() {
    // Training BatchNorm couples the time steps through its statistics; chunked segments
    // compute them in passes (tests/chunked_batch_norm.rs shows the results are exact).
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    let p = Policy::checkpoint(CompressorKind::BitSpike, 2);
    model.apply_plan(&Plan::from_entries([("block1", p)])).unwrap();
    model.apply_plan(&Plan::from_entries([("block2.bn", p)])).unwrap();
}

#[test]
fn chunking_a_segment_with_per_element_dropout_says_which_module_and_why() {
    // A dropout drawing an independent mask per element (and so per time step) still couples
    // the time steps: chunks would draw different masks.
    let mut init = Init::new(Device::META, 0);
    let body = Sequential::new()
        .push_named("fc", Linear::new(&mut init, 4, 3, true).unwrap())
        .push_named("drop", Dropout::per_element(0.5))
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap());
    let root = Sequential::new().push_named("body", body);
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![4],
        classes: 3,
    };
    let mut model = Model::new("per-element-dropout", Box::new(root), spec, Device::META);
    let p = Policy::checkpoint(CompressorKind::BitSpike, 2);
    let msg = model
        .apply_plan(&Plan::from_entries([("body", p)]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("cannot be chunked over time")
            && msg.contains("'body'")
            && msg.contains("Dropout 'body.drop'")
            && msg.contains("independent mask per time step"),
        "{msg}"
    );
    // Its neighbours can be chunked.
    model.apply_plan(&Plan::from_entries([("body.sn", p)])).unwrap();
}

/// The default plan is the empty plan of this build's format: it reads back and applies.
#[test]
fn the_default_plan_is_the_empty_plan() {
    assert_eq!(Plan::default(), Plan::store_all());
    assert_eq!(
        Plan::from_json(&Plan::default().to_json()).unwrap(),
        Plan::default()
    );
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    model
        .apply_plan(&Plan::from_entries([("block2", Policy::CHECKPOINT)]))
        .unwrap();
    model.apply_plan(&Plan::default()).unwrap();
    assert_eq!(model.plan(), Plan::store_all());
}

#[test]
fn rejected_plans_leave_the_policies_unchanged() {
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    model
        .apply_plan(&Plan::from_entries([("block2", Policy::CHECKPOINT)]))
        .unwrap();
    let before = model.plan();
    let bad = Plan::from_entries([("block1", Policy::CHECKPOINT), ("nope", Policy::CHECKPOINT)]);
    assert!(model.apply_plan(&bad).is_err());
    assert_eq!(model.plan(), before, "all or nothing");
    let dup = Plan::from_entries([("block1", Policy::CHECKPOINT), ("block1", Policy::Store)]);
    assert!(
        model
            .apply_plan(&dup)
            .unwrap_err()
            .to_string()
            .contains("more than once")
    );
    assert!(
        Plan::from_json(r#"{"version": 7, "entries": []}"#)
            .unwrap_err()
            .to_string()
            .contains("version 7")
    );
    let typo = r#"{"version": 1, "entries": [{"path": "x", "policy": {"kind": "chekpoint"}}]}"#;
    assert!(
        Plan::from_json(typo)
            .unwrap_err()
            .to_string()
            .contains("chekpoint")
    );
}

#[test]
fn rejected_inputs_leave_parameters_and_statistics_unchanged() {
    let model = tiny_conv_snn(Device::Cpu, 0, 4);
    let reference = fingerprint(&tiny_conv_snn(Device::Cpu, 0, 4), 1, 2);
    let mut t = trainer(&model);
    let good = batch(&model, 2, 0);
    let wrong_shape = Batch {
        input: Tensor::zeros([4, 2, 3, 8, 8], DType::F32, Device::Cpu, MemoryKind::Input).unwrap(),
        target: good.target.clone(),
    };
    let msg = t
        .step(&model, &wrong_shape, StepOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("takes input [T=4, N, 2, 8, 8]") && msg.contains("[4, 2, 3, 8, 8]"),
        "{msg}"
    );
    let bad_label = Batch {
        input: good.input.clone(),
        target: Target::Labels(Tensor::from_vec(vec![1i64, 9], [2], Device::Cpu, MemoryKind::Input).unwrap()),
    };
    let msg = t
        .step(&model, &bad_label, StepOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("label 9 at position 1 is outside 0..5"), "{msg}");
    // Nothing ran: a fresh model and this one give the same fingerprint.
    assert_eq!(fingerprint(&model, 1, 2), reference);
}

#[test]
fn policies_on_the_root_and_leaves_are_allowed() {
    let mut model = zoo_small("spiking-mlp", Device::Cpu, 0);
    let base = fingerprint(&zoo_small("spiking-mlp", Device::Cpu, 0), 1, 2);
    model
        .apply_plan(&Plan::from_entries([
            ("", Policy::CHECKPOINT),
            ("1", Policy::CHECKPOINT),
        ]))
        .unwrap();
    assert_eq!(fingerprint(&model, 1, 2), base);
}

#[test]
fn spatial_split_moves_a_policy_to_the_children() {
    let mut model = zoo_small("cifar10dvs-vgg", Device::META, 0);
    model.set_policy("features.3", Policy::CHECKPOINT).unwrap();
    model.split_policy("features.3").unwrap();
    let paths: Vec<String> = model.plan().entries.into_iter().map(|e| e.path).collect();
    assert_eq!(paths, ["features.3.neuron", "features.3.proj_bn"]);
    let msg = model.split_policy("features.3.neuron").unwrap_err().to_string();
    assert!(msg.contains("no children"), "{msg}");
}

#[test]
fn runs_of_children_are_validated() {
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    let entry = |path: &str, a, b, chunks| memopt_checkpoint::PlanEntry {
        path: path.into(),
        children: Some([a, b]),
        into_next: 0,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    };
    let plan = |entries: Vec<memopt_checkpoint::PlanEntry>| Plan {
        update_in_backward: false,
        version: 1,
        entries,
    };
    model
        .apply_plan(&plan(vec![entry("", 0, 3, 1), entry("", 5, 7, 2)]))
        .unwrap();
    assert_eq!(model.plan().entries.len(), 2);
    let msg = model
        .apply_plan(&plan(vec![entry("", 0, 3, 1), entry("", 2, 4, 1)]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("[2..4] overlaps [0..3]"), "{msg}");
    let msg = model
        .apply_plan(&plan(vec![entry("", 3, 9, 1)]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("0 <= start < end <= 7"), "{msg}");
    // A run through a training BatchNorm may be chunked (its statistics are computed in passes).
    model.apply_plan(&plan(vec![entry("", 0, 2, 2)])).unwrap();
    let msg = model
        .apply_plan(&plan(vec![entry("block1.conv", 0, 1, 1)]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("Conv2d does not run its children as a chain"),
        "{msg}"
    );
    let json = model.plan().to_json();
    assert!(json.contains("\"children\""), "{json}");
    assert_eq!(Plan::from_json(&json).unwrap(), model.plan());
}
