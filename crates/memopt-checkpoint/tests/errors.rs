//! Rejected plans and inputs are clear errors that name the problem, and change nothing.

mod common;

use common::{batch, fingerprint, tiny_conv_snn, trainer, zoo_small};
use memopt_checkpoint::{Batch, CheckpointError, Plan, Policy, StepOptions, Target};
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
    let p = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: t + 1,
    };
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
    let zero = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 0,
    };
    let msg = model
        .apply_plan(&Plan::from_entries([("0", zero)]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("chunks must be at least 1"), "{msg}");
}

#[test]
fn chunking_a_segment_with_batch_norm_says_which_module_and_why() {
    let mut model = tiny_conv_snn(Device::META, 0, 4);
    let p = Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 2,
    };
    let msg = model
        .apply_plan(&Plan::from_entries([("block1", p)]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("'block1'") && msg.contains("BatchNorm2d 'block1.bn'") && msg.contains("all time steps"),
        "{msg}"
    );
    // The BatchNorm's neighbour alone can be chunked.
    model.apply_plan(&Plan::from_entries([("block1.sn", p)])).unwrap();
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
        policy: Policy::Checkpoint {
            compressor: CompressorKind::BitSpike,
            chunks,
        },
    };
    let plan = |entries: Vec<memopt_checkpoint::PlanEntry>| Plan { version: 1, entries };
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
    let msg = model
        .apply_plan(&plan(vec![entry("", 0, 2, 2)]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("BatchNorm2d 'block1.bn'"), "{msg}");
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
