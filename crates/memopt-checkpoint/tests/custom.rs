//! Custom models from JSON: the example file builds on Meta and CPU with the same allocations,
//! trains on the CPU, keeps gradients bit-identical under checkpointing of its residual blocks,
//! and every malformed description is an error naming the field, the layer and what is valid.

mod common;

use common::{batch, fingerprint, trainer};
use memopt_checkpoint::zoo::custom::{CustomModel, Layer};
use memopt_checkpoint::{CheckpointError, InputSpec, Plan, Policy, StepOptions};
use memopt_core::{Device, MemoryTracker};

const EXAMPLE: &str = include_str!("../../../examples/models/small-snn.json");

fn example() -> CustomModel {
    CustomModel::from_json(EXAMPLE).unwrap()
}

#[test]
fn the_example_file_builds_on_meta_with_inferred_channels() {
    let custom = example();
    assert_eq!(custom.name(), "small-snn");
    assert_eq!(custom.spec().sample, vec![2, 16, 16]);
    assert_eq!(custom.layers().len(), 9);
    assert!(matches!(custom.layers()[4], Layer::Residual { .. }));
    assert_eq!(custom.output_shape(custom.spec()).unwrap(), vec![10]);
    let model = custom.build(custom.spec(), Device::META, 0).unwrap();
    // Channels inferred: conv 2->8, residual 8->8, residual 8->16 with a 1x1 shortcut, linear
    // 16*4*4 -> 10.
    let params: Vec<(String, Vec<usize>)> = model
        .params()
        .into_iter()
        .map(|(p, t)| (p, t.tensor().dims().to_vec()))
        .collect();
    let dims = |path: &str| params.iter().find(|(p, _)| p == path).map(|(_, d)| d.clone());
    assert_eq!(dims("0.weight"), Some(vec![8, 2, 3, 3]));
    assert_eq!(dims("4.body.0.weight"), Some(vec![8, 8, 3, 3]));
    assert_eq!(dims("4.body.0.bias"), None, "bias: false");
    assert_eq!(dims("5.body.0.weight"), Some(vec![16, 8, 3, 3]));
    assert_eq!(dims("5.shortcut.0.weight"), Some(vec![16, 8, 1, 1]));
    assert_eq!(dims("8.weight"), Some(vec![10, 256]));
    let types: Vec<(String, &str)> = model
        .modules()
        .into_iter()
        .map(|m| (m.path, m.type_name))
        .collect();
    assert!(types.contains(&("4".to_string(), "Residual")));
    assert!(types.contains(&("4.after.0".to_string(), "LIFNode")));
    assert!(types.contains(&("1".to_string(), "BatchNorm2d")));
    assert!(
        !types.iter().any(|(p, _)| p == "4.shortcut"),
        "an empty shortcut is the identity, not a module"
    );
}

#[test]
fn meta_and_cpu_steps_allocate_the_same_peak() {
    let custom = example();
    let peak = |device: Device| {
        let tracker = MemoryTracker::new(device);
        let _installed = MemoryTracker::install(tracker.clone());
        let model = custom.build(custom.spec(), device, 1).unwrap();
        let mut t = trainer(&model);
        let out = t
            .step(&model, &batch(&model, 2, 0), StepOptions::default())
            .unwrap();
        (tracker.peak_bytes(), out.loss)
    };
    let (meta, meta_loss) = peak(Device::META);
    let (cpu, cpu_loss) = peak(Device::Cpu);
    assert_eq!(meta, cpu);
    assert!(meta_loss.is_none());
    assert!(cpu_loss.is_some_and(f32::is_finite));
}

#[test]
fn the_example_trains_on_the_cpu() {
    let custom = example();
    let model = custom.build(custom.spec(), Device::Cpu, 0).unwrap();
    let mut t = trainer(&model);
    let b = batch(&model, 4, 3);
    let losses: Vec<f32> = (0..12)
        .map(|_| t.step(&model, &b, StepOptions::default()).unwrap().loss.unwrap())
        .collect();
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(losses[11] < losses[0], "loss {} -> {}", losses[0], losses[11]);
}

#[test]
fn checkpointing_residual_blocks_keeps_gradients_bit_identical() {
    let custom = example();
    let stored = custom.build(custom.spec(), Device::Cpu, 5).unwrap();
    let base = fingerprint(&stored, 2, 3);
    for plan in [
        Plan::from_entries([("4", Policy::CHECKPOINT), ("5", Policy::CHECKPOINT)]),
        Plan::from_entries([("5.body", Policy::CHECKPOINT), ("5.shortcut", Policy::CHECKPOINT)]),
        Plan::from_entries([("4.after", Policy::CHECKPOINT), ("0", Policy::CHECKPOINT)]),
    ] {
        let mut model = custom.build(custom.spec(), Device::Cpu, 5).unwrap();
        model.apply_plan(&plan).unwrap();
        assert_eq!(fingerprint(&model, 2, 3), base, "plan {plan:?}");
    }
}

fn err(json: &str) -> String {
    match CustomModel::from_json(json) {
        Ok(_) => panic!("accepted {json}"),
        Err(e) => e.to_string(),
    }
}

fn with_layers(layers: &str) -> String {
    format!(
        r#"{{"name": "m", "input": {{"time_steps": 2, "sample": [2, 8, 8], "classes": 3}}, "layers": {layers}}}"#
    )
}

#[test]
fn malformed_descriptions_name_the_problem_and_what_is_valid() {
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("{ not json".into(), vec!["invalid model description", "line 1"]),
        (
            r#"{"name": "m", "input": {"time_steps": 2, "sample": [4], "classes": 3}}"#.into(),
            vec!["missing field `layers`"],
        ),
        (
            r#"{"name": "m", "inputs": {}, "layers": []}"#.into(),
            vec!["unknown field `inputs`", "`input`"],
        ),
        (
            with_layers(r#"[{"type": "conv3d", "out": 4, "kernel": 3}]"#),
            vec!["layers[0]", "unknown variant `conv3d`", "`conv2d`", "`residual`"],
        ),
        (
            with_layers(r#"[{"type": "conv2d", "out": 4, "kernal": 3}]"#),
            vec!["layers[0]", "unknown field `kernal`", "`kernel`"],
        ),
        (
            with_layers(r#"[{"type": "conv2d", "out": 4}]"#),
            vec!["layers[0]", "missing field `kernel`"],
        ),
        (
            with_layers(r#"[{"out": 4}]"#),
            vec!["layers[0]", "missing field `type`"],
        ),
        (with_layers("[]"), vec!["at least one layer"]),
        (
            with_layers(
                r#"[{"type": "flatten"}, {"type": "dropout", "p": 1.5}, {"type": "linear", "out": 3}]"#,
            ),
            vec!["layers[1] (dropout)", "[0, 1)"],
        ),
        (
            with_layers(
                r#"[{"type": "lif", "tau": 0.5}, {"type": "flatten"}, {"type": "linear", "out": 3}]"#,
            ),
            vec!["layers[0] (lif)", "tau", "> 1"],
        ),
        (
            with_layers(r#"[{"type": "if", "tau": 2.0}, {"type": "flatten"}, {"type": "linear", "out": 3}]"#),
            vec!["layers[0] (if)", "lif and plif"],
        ),
        (
            with_layers(r#"[{"type": "lif", "surrogate": "relu"}]"#),
            vec!["layers[0]", "unknown variant `relu`", "`sigmoid`", "`atan`"],
        ),
        (
            with_layers(
                r#"[{"type": "residual", "body": [{"type": "conv2d", "out": 4, "kernel": 3, "paddin": 1}]}]"#,
            ),
            vec!["layers[0].body[0]", "unknown field `paddin`"],
        ),
        (
            with_layers(r#"[{"type": "residual", "body": [], "after": []}]"#),
            vec!["layers[0].body", "at least one layer"],
        ),
        (
            with_layers(r#"[{"type": "residual", "body": [{"type": "relu"}], "bypass": []}]"#),
            vec!["layers[0]", "unknown field `bypass`", "`shortcut`"],
        ),
    ];
    for (json, needles) in cases {
        let msg = err(&json);
        for n in needles {
            assert!(msg.contains(n), "error for {json}\n  {msg}\n  lacks '{n}'");
        }
    }
}

#[test]
fn shapes_that_do_not_fit_name_the_layer_and_the_shape_it_needs() {
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            with_layers(r#"[{"type": "linear", "out": 3}]"#),
            vec!["layers[0] (linear)", "[F]", "[2, 8, 8]", "flatten"],
        ),
        (
            with_layers(r#"[{"type": "flatten"}, {"type": "conv2d", "out": 4, "kernel": 3}]"#),
            vec!["layers[1] (conv2d)", "[C, H, W]", "[128]"],
        ),
        (
            with_layers(r#"[{"type": "conv2d", "out": 4, "kernel": 9}]"#),
            vec!["layers[0] (conv2d)", "[2, 8, 8]"],
        ),
        (
            with_layers(
                r#"[{"type": "residual", "body": [{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}]}]"#,
            ),
            vec!["layers[0] (residual)", "[4, 8, 8]", "[2, 8, 8]", "identity"],
        ),
        (
            with_layers(r#"[{"type": "flatten"}, {"type": "linear", "out": 7}]"#),
            vec!["[classes] = [3]", "[7]"],
        ),
    ];
    for (json, needles) in cases {
        let msg = err(&json);
        assert!(msg.starts_with("input does not fit the model"), "{msg}");
        for n in needles {
            assert!(msg.contains(n), "error for {json}\n  {msg}\n  lacks '{n}'");
        }
    }
    // An override of the sample shape is checked when building.
    let custom = example();
    let flat = InputSpec {
        time_steps: 2,
        sample: vec![64],
        classes: 10,
    };
    let e = custom.build(&flat, Device::META, 0).unwrap_err();
    assert!(matches!(e, CheckpointError::InvalidInput(_)), "{e}");
    assert!(e.to_string().contains("layers[0] (conv2d)"), "{e}");
    let bigger = InputSpec {
        time_steps: 3,
        sample: vec![2, 32, 32],
        classes: 10,
    };
    // A larger image fits: the linear layer's input features are inferred again.
    let model = custom.build(&bigger, Device::META, 0).unwrap();
    let fc = model
        .params()
        .into_iter()
        .find(|(p, _)| p == "8.weight")
        .unwrap()
        .1;
    assert_eq!(fc.tensor().dims(), &[10, 16 * 8 * 8]);
}

/// The library's file reader is bounded like the CLI's: regular files only, at most
/// MAX_DESCRIPTION_BYTES, UTF-8 with or without a byte-order mark; the layer count is bounded
/// by the parser.
#[test]
fn model_files_are_bounded_regular_files() {
    use memopt_checkpoint::zoo::custom::{MAX_DESCRIPTION_BYTES, MAX_LAYERS};
    // Removed with everything in it when dropped, also when the test fails.
    let tmp = tempfile::Builder::new()
        .prefix("memopt-custom-files-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let json = r#"{"name": "bom", "input": {"time_steps": 2, "sample": [4], "classes": 3},
                   "layers": [{"type": "linear", "out": 3}]}"#;
    let bom = dir.join("bom.json");
    std::fs::write(&bom, format!("\u{feff}{json}")).unwrap();
    assert_eq!(CustomModel::from_file(&bom).unwrap().name(), "bom");
    let err = |path: &std::path::Path| CustomModel::from_file(path).unwrap_err().to_string();
    let e = err(dir);
    assert!(e.contains("is a directory"), "{e}");
    if std::path::Path::new("/dev/zero").exists() {
        let e = err(std::path::Path::new("/dev/zero"));
        assert!(e.contains("not a regular file"), "{e}");
    }
    let big = dir.join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_DESCRIPTION_BYTES + 1).unwrap();
    let e = err(&big);
    assert!(
        e.contains(&format!("at most {MAX_DESCRIPTION_BYTES} bytes")),
        "{e}"
    );
    let many = dir.join("many.json");
    let layers = vec![r#"{"type": "linear", "out": 4}"#; MAX_LAYERS + 1].join(",");
    std::fs::write(
        &many,
        format!(r#"{{"name": "many", "input": {{"time_steps": 1, "sample": [4], "classes": 4}}, "layers": [{layers}]}}"#),
    )
    .unwrap();
    let e = err(&many);
    assert!(e.contains(&format!("at most {MAX_LAYERS}")), "{e}");
}

/// A kernel so large that its weights per output channel overflow is a clean error on every
/// device, not an overflow panic (found by the parser fuzz test).
#[test]
fn a_kernel_whose_weights_overflow_is_an_error() {
    // Padding makes the padded input as large as the kernel, so shapes propagate.
    let json = with_layers(
        r#"[{"type": "conv2d", "out": 4, "kernel": 2049638230412172402, "padding": 1024819115206086201},
            {"type": "flatten"}, {"type": "linear", "out": 3}]"#,
    );
    let outcome = CustomModel::from_json(&json).and_then(|m| {
        let spec = m.spec().clone();
        m.build(&spec, Device::META, 0).map(|_| ())
    });
    let e = outcome.expect_err("the kernel cannot fit").to_string();
    assert!(e.contains("kernel"), "{e}");
}

const TRANSFORMER: &str = include_str!("../../../examples/models/spikformer-tiny.json");

/// The transformer example at 2 time steps of 3x8x8 (4 tokens).
fn tiny_transformer(device: Device) -> memopt_checkpoint::Model {
    let custom = CustomModel::from_json(TRANSFORMER).unwrap();
    let spec = InputSpec {
        time_steps: 2,
        sample: vec![3, 8, 8],
        classes: 10,
    };
    custom.build(&spec, device, 3).unwrap()
}

#[test]
fn the_transformer_example_describes_attention_blocks_without_rust() {
    let custom = CustomModel::from_json(TRANSFORMER).unwrap();
    assert_eq!(custom.output_shape(custom.spec()).unwrap(), vec![10]);
    let model = custom.build(custom.spec(), Device::META, 0).unwrap();
    let dims = |path: &str| {
        model
            .params()
            .into_iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.tensor().dims().to_vec())
    };
    // SpikingJelly's SpikingSelfAttention names inside the residual's body.
    assert_eq!(dims("12.body.0.qkv_conv_bn.0.weight"), Some(vec![384, 128, 1]));
    assert_eq!(dims("12.body.0.proj_conv_bn.1.weight"), Some(vec![128]));
    assert_eq!(dims("13.body.0.weight"), Some(vec![512, 128, 1]));
    let types: Vec<(String, &str)> = model
        .modules()
        .into_iter()
        .map(|m| (m.path, m.type_name))
        .collect();
    assert!(types.contains(&("12.body.0".to_string(), "SpikingSelfAttention")));
    assert!(types.contains(&("13.body.1".to_string(), "BatchNorm1d")));
    let plans = [
        Plan::from_entries([("12", Policy::CHECKPOINT), ("13", Policy::CHECKPOINT)]),
        Plan::from_entries([("12.body.0", Policy::StorePacked)]),
        Plan::from_entries([(
            "14",
            Policy::checkpoint(memopt_compress::CompressorKind::BitSpike, 2),
        )]),
    ];
    for plan in &plans {
        common::assert_exact_and_meta_matches_cpu(tiny_transformer, plan, 2);
    }
}

#[test]
fn attention_layers_that_do_not_fit_say_what_would() {
    let e = err(&with_layers(
        r#"[{"type": "attention", "heads": 2}, {"type": "flatten"}, {"type": "linear", "out": 3}]"#,
    ));
    assert!(
        e.contains("layers[0] (attention)") && e.contains("[C, L]") && e.contains("tokens"),
        "{e}"
    );
    let e = err(&with_layers(
        r#"[{"type": "conv2d", "out": 6, "kernel": 1}, {"type": "tokens"}, {"type": "attention", "heads": 4}, {"type": "token_mean"}, {"type": "linear", "out": 3}]"#,
    ));
    assert!(e.contains("4 heads do not divide the 6 channels"), "{e}");
    let e = err(&with_layers(
        r#"[{"type": "token_mean"}, {"type": "linear", "out": 3}]"#,
    ));
    assert!(
        e.contains("layers[0] (token_mean)") && e.contains("[C, L]"),
        "{e}"
    );
}
