//! The model zoo: SpikingJelly's architectures layer for layer (module paths, order, parameter
//! counts equal to PyTorch's), every model trainable on Meta at its default and small specs, a
//! real CPU step per new model, exact checkpointing of residual blocks, and clear errors for
//! inputs a model cannot take.

mod common;

use common::{batch, fingerprint, trainer};
use memopt_checkpoint::{
    CheckpointError, Cx, InputSpec, Model, Plan, Policy, Recording, StepOptions, Var, ops, zoo,
};
use memopt_compress::CompressorKind;
use memopt_core::{Device, Philox};

const NEW_MODELS: [&str; 3] = ["sew-resnet18", "spiking-resnet18", "spiking-vgg11-bn"];

fn spec(time_steps: usize, sample: &[usize], classes: usize) -> InputSpec {
    InputSpec {
        time_steps,
        sample: sample.to_vec(),
        classes,
    }
}

fn build(name: &str, spec: &InputSpec, device: Device) -> Model {
    zoo::build(name, spec, device, 1).unwrap()
}

/// Parameter count of a module subtree, from the module tree walk.
fn params_under(model: &Model, path: &str) -> usize {
    model
        .modules()
        .into_iter()
        .find(|m| m.path == path)
        .unwrap_or_else(|| panic!("no module '{path}'"))
        .param_elems
}

// ResNet-18 (BasicBlock, [2, 2, 2, 2]), by hand; convs have no bias, BN has weight + bias:
//   conv1 64*3*7*7 = 9,408; bn1 128
//   layer1: 2 x (2 x 64*64*9 + 2 x 128) = 2 x 73,984 = 147,968
//   layer2: block 0: 64*128*9 + 128*128*9 + 2 x 256 + downsample (64*128 + 256) = 230,144;
//           block 1: 2 x 147,456 + 512 = 295,424; total 525,568
//   layer3: block 0: 128*256*9 + 256*256*9 + 1,024 + (128*256 + 512) = 919,040;
//           block 1: 2 x 589,824 + 1,024 = 1,180,672; total 2,099,712
//   layer4: block 0: 256*512*9 + 512*512*9 + 2,048 + (256*512 + 1,024) = 3,673,088;
//           block 1: 2 x 2,359,296 + 2,048 = 4,720,640; total 8,393,728
//   body = 11,176,512; fc 512*K + K  =>  K = 1000: 11,689,512 (torchvision's resnet18),
//   K = 10: 11,181,642. LIF neurons have no parameters, so SEW and spiking ResNet agree.
const RESNET18_BODY: usize = 11_176_512;

// VGG-11-BN (cfg A), by hand; convs have a bias:
//   convs: 3*64*9+64 = 1,792; 64*128*9+128 = 73,856; 128*256*9+256 = 295,168;
//          256*256*9+256 = 590,080; 256*512*9+512 = 1,180,160; 3 x (512*512*9+512) = 7,079,424
//          => 9,220,480
//   BN: 2 x (64 + 128 + 256 + 256 + 4 x 512) = 5,504
//   classifier: 25,088*4,096+4,096 = 102,764,544; 4,096*4,096+4,096 = 16,781,312;
//               4,096*K + K
//   K = 1000: 132,868,840 (torchvision's vgg11_bn); K = 10: 128,812,810.
const VGG11_BN_BODY: usize = 9_220_480 + 5_504 + 102_764_544 + 16_781_312;

#[test]
fn parameter_counts_equal_pytorch() {
    // sum(p.numel() for p in spikformer_cifar10().parameters()) in SpikingJelly 2.0.
    let spikformer = build("spikformer-cifar10", &spec(4, &[3, 32, 32], 10), Device::META);
    assert_eq!(spikformer.param_count(), 9_310_906);
    // SpikeDrivenTransformer(embed_dims=512, num_heads=8, depths=2, pooling_stat="0011"), 10 classes.
    let sdt = build(
        "spike-driven-transformer",
        &spec(4, &[3, 32, 32], 10),
        Device::META,
    );
    assert_eq!(sdt.param_count(), 10_234_378);
    for name in ["sew-resnet18", "spiking-resnet18"] {
        let big = build(name, &spec(4, &[3, 224, 224], 1000), Device::META);
        assert_eq!(big.param_count(), 11_689_512, "{name}, 1000 classes");
        let small = build(name, &spec(2, &[3, 32, 32], 10), Device::META);
        assert_eq!(small.param_count(), 11_181_642, "{name}, 10 classes");
        assert_eq!(RESNET18_BODY + 512 * 10 + 10, 11_181_642);
        // The per-stage figures of the derivation above.
        for (path, count) in [
            ("conv1", 9_408),
            ("bn1", 128),
            ("layer1", 147_968),
            ("layer2", 525_568),
            ("layer2.0", 230_144),
            ("layer2.0.downsample", 8_448),
            ("layer3", 2_099_712),
            ("layer4", 8_393_728),
            ("layer4.1", 4_720_640),
            ("fc", 5_130),
        ] {
            assert_eq!(params_under(&small, path), count, "{name} {path}");
        }
    }
    let vgg = build("spiking-vgg11-bn", &spec(4, &[3, 224, 224], 1000), Device::META);
    assert_eq!(vgg.param_count(), 132_868_840);
    assert_eq!(VGG11_BN_BODY + 4_096 * 1000 + 1000, 132_868_840);
    // The adaptive pool makes the count independent of the input size.
    let vgg = build("spiking-vgg11-bn", &spec(2, &[3, 32, 32], 10), Device::META);
    assert_eq!(vgg.param_count(), 128_812_810);
    assert_eq!(params_under(&vgg, "features"), 9_220_480 + 5_504);
    assert_eq!(params_under(&vgg, "classifier.0"), 102_764_544);
}

/// Every path of SpikingJelly's ResNet-18, in `named_modules()` order (pre-order, children in
/// registration order).
fn resnet18_paths(sew: bool) -> Vec<String> {
    let mut p: Vec<String> = ["", "conv1", "bn1", "sn1", "maxpool"].map(String::from).to_vec();
    for layer in 1..=4 {
        p.push(format!("layer{layer}"));
        for block in 0..2 {
            let b = format!("layer{layer}.{block}");
            p.push(b.clone());
            for child in ["conv1", "bn1", "sn1", "conv2", "bn2", "sn2"] {
                p.push(format!("{b}.{child}"));
            }
            if layer > 1 && block == 0 {
                for child in ["downsample", "downsample.0", "downsample.1"] {
                    p.push(format!("{b}.{child}"));
                }
                if sew {
                    p.push(format!("{b}.downsample_sn"));
                }
            }
        }
    }
    p.extend(["avgpool", "fc"].map(String::from));
    p
}

/// Types of `features` of VGG-11-BN: cfg A = [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M].
fn vgg11_bn_feature_types() -> Vec<&'static str> {
    let mut t = Vec::new();
    for v in [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0] {
        if v == 0 {
            t.push("MaxPool2d");
        } else {
            t.extend(["Conv2d", "BatchNorm2d", "LIFNode"]);
        }
    }
    t
}

#[test]
fn module_trees_follow_spikingjelly() {
    for (name, sew, root_type) in [
        ("sew-resnet18", true, "SEWResNet"),
        ("spiking-resnet18", false, "SpikingResNet"),
    ] {
        let model = build(name, &spec(2, &[3, 32, 32], 10), Device::META);
        let modules = model.modules();
        let paths: Vec<&str> = modules.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, resnet18_paths(sew), "{name}");
        assert_eq!(modules[0].type_name, root_type);
        let type_of = |p: &str| modules.iter().find(|m| m.path == p).unwrap().type_name;
        for (path, ty) in [
            ("conv1", "Conv2d"),
            ("bn1", "BatchNorm2d"),
            ("sn1", "LIFNode"),
            ("maxpool", "MaxPool2d"),
            ("layer1", "Sequential"),
            ("layer3.0", "BasicBlock"),
            ("layer3.0.downsample", "Sequential"),
            ("layer3.0.downsample.0", "Conv2d"),
            ("layer3.0.downsample.1", "BatchNorm2d"),
            ("layer4.1.sn2", "LIFNode"),
            ("avgpool", "AdaptiveAvgPool2d"),
            ("fc", "Linear"),
        ] {
            assert_eq!(type_of(path), ty, "{name} {path}");
        }
        if sew {
            assert_eq!(type_of("layer2.0.downsample_sn"), "LIFNode");
        }
        // Parameters and buffers under SpikingJelly's state_dict names (without BN's
        // num_batches_tracked, which we do not keep).
        let params: Vec<String> = model.params().into_iter().map(|(p, _)| p).collect();
        assert_eq!(params.len(), 1 + 2 + 8 * (2 + 4) + 3 * 3 + 2, "{name}");
        for p in [
            "conv1.weight",
            "bn1.weight",
            "layer1.0.conv1.weight",
            "layer2.0.downsample.0.weight",
            "layer2.0.downsample.1.bias",
            "layer4.1.bn2.weight",
            "fc.weight",
            "fc.bias",
        ] {
            assert!(params.iter().any(|q| q == p), "{name}: no parameter {p}");
        }
        assert!(!params.iter().any(|q| q.contains("conv") && q.ends_with(".bias")));
        let buffers: Vec<String> = model.buffers().into_iter().map(|(p, _)| p).collect();
        assert_eq!(buffers.len(), 2 * (1 + 8 * 2 + 3), "{name}");
        assert!(buffers.iter().any(|b| b == "layer3.0.downsample.1.running_var"));
    }

    let vgg = build("spiking-vgg11-bn", &spec(2, &[3, 32, 32], 10), Device::META);
    let modules = vgg.modules();
    assert_eq!(modules[0].type_name, "SpikingVGG");
    let top: Vec<&str> = modules
        .iter()
        .filter(|m| m.depth == 1)
        .map(|m| m.path.as_str())
        .collect();
    assert_eq!(top, ["features", "avgpool", "classifier"]);
    let under = |prefix: &str| -> Vec<(String, &'static str)> {
        modules
            .iter()
            .filter(|m| m.depth == 2 && m.path.starts_with(prefix))
            .map(|m| (m.path.clone(), m.type_name))
            .collect()
    };
    let features = under("features.");
    let want: Vec<(String, &str)> = vgg11_bn_feature_types()
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("features.{i}"), t))
        .collect();
    assert_eq!(features, want);
    assert_eq!(features.len(), 29);
    let classifier = under("classifier.");
    let want: Vec<(String, &str)> = [
        "Linear", "LIFNode", "Dropout", "Linear", "LIFNode", "Dropout", "Linear",
    ]
    .into_iter()
    .enumerate()
    .map(|(i, t)| (format!("classifier.{i}"), t))
    .collect();
    assert_eq!(classifier, want);
    // Every path in pre-order: the root, `features` and its 29 layers, `avgpool`, `classifier`
    // and its 7 layers.
    assert_eq!(modules.len(), 1 + 1 + 29 + 1 + 1 + 7);
    assert_eq!(modules[31].path, "avgpool");
    assert_eq!(modules[31].type_name, "AdaptiveAvgPool2d");
    let params: Vec<String> = vgg.params().into_iter().map(|(p, _)| p).collect();
    for p in [
        "features.0.weight",
        "features.0.bias",
        "features.26.bias",
        "classifier.6.weight",
    ] {
        assert!(params.iter().any(|q| q == p), "no parameter {p}");
    }
}

/// Forward without recording (eval or training mode) and return the output dims and values.
fn forward(model: &Model, n: usize, training: bool) -> (Vec<usize>, Option<Vec<f32>>) {
    let b = batch(model, n, 3);
    let mut cx = Cx::new(
        model.device(),
        model.policies(),
        Philox::new(5),
        Recording::Off,
        training,
    );
    let x = cx.leaf(b.input.clone(), false);
    let y = model.forward(&mut cx, x).unwrap();
    (y.dims().to_vec(), y.tensor().unwrap().to_vec_f32().ok())
}

#[test]
fn every_zoo_model_trains_on_meta_at_default_and_small_specs() {
    let names: Vec<&str> = zoo::entries().iter().map(|e| e.name).collect();
    assert_eq!(
        names,
        [
            "cifar10dvs-vgg",
            "sew-resnet18",
            "spiking-resnet18",
            "spiking-vgg11-bn",
            "spikformer-cifar10",
            "spike-driven-transformer",
            "toy-if",
            "spiking-mlp"
        ]
    );
    for entry in zoo::entries() {
        for s in [&entry.published, &entry.small] {
            let model = build(entry.name, s, Device::META);
            let (dims, _) = forward(&model, 2, true);
            // The Spike-Driven Transformer averages the time steps itself, as SpikingJelly's does.
            let want = match entry.name {
                "spike-driven-transformer" => vec![2, s.classes],
                _ => vec![s.time_steps, 2, s.classes],
            };
            assert_eq!(dims, want, "{} {s:?}", entry.name);
            let out = trainer(&model)
                .step(&model, &batch(&model, 2, 0), StepOptions::default())
                .unwrap_or_else(|e| panic!("{} {s:?}: {e}", entry.name));
            assert!(out.loss.is_none(), "Meta computes no values");
        }
    }
    for name in NEW_MODELS {
        let e = zoo::entry(name).unwrap();
        assert_eq!(e.published, spec(4, &[3, 224, 224], 1000), "{name}");
        assert!(e.small.sample == [3, 32, 32] && e.small.classes == 10 && e.small.time_steps <= 4);
    }
}

#[test]
fn image_models_take_any_size_from_32() {
    for name in ["sew-resnet18", "spiking-resnet18", "spiking-vgg11-bn"] {
        for hw in [[32, 32], [33, 47], [64, 40], [96, 96]] {
            let s = spec(1, &[3, hw[0], hw[1]], 7);
            let (dims, _) = forward(&build(name, &s, Device::META), 1, false);
            assert_eq!(dims, [1, 1, 7], "{name} {hw:?}");
        }
    }
}

/// One real training step; every parameter gets a finite gradient and every neuron ran.
fn cpu_step(name: &str) {
    let model = build(name, &zoo::entry(name).unwrap().small, Device::Cpu);
    let opts = StepOptions {
        keep_grads: true,
        keep_states: true,
        ..StepOptions::default()
    };
    let out = trainer(&model).step(&model, &batch(&model, 2, 0), opts).unwrap();
    let loss = out.loss.unwrap();
    assert!(loss.is_finite() && loss > 0.0, "{name}: loss {loss}");
    let grads = out.grads.unwrap();
    for (path, p) in model.params() {
        let g = grads
            .get(p.id())
            .unwrap_or_else(|| panic!("{name}: no gradient for {path}"))
            .to_vec_f32()
            .unwrap();
        assert_eq!(g.len(), p.elem_count());
        assert!(
            g.iter().all(|v| v.is_finite()),
            "{name}: {path} has a non-finite gradient"
        );
    }
    let mut ran: Vec<String> = out.final_states.iter().map(|(p, _)| p.clone()).collect();
    let mut neurons: Vec<String> = model
        .modules()
        .into_iter()
        .filter(|m| m.stateful)
        .map(|m| m.path)
        .collect();
    ran.sort();
    neurons.sort();
    assert_eq!(ran, neurons, "{name}: every neuron keeps a final state");
    // The surrogate gradient reaches the first layer.
    let conv1 = model.params().into_iter().next().unwrap().1.id();
    assert!(
        grads
            .get(conv1)
            .unwrap()
            .to_vec_f32()
            .unwrap()
            .iter()
            .any(|v| *v != 0.0)
    );
}

#[test]
fn spikformer_cifar10_trains_one_cpu_step() {
    cpu_step("spikformer-cifar10");
}

#[test]
fn spike_driven_transformer_trains_one_cpu_step() {
    cpu_step("spike-driven-transformer");
}

#[test]
fn sew_resnet18_trains_one_cpu_step() {
    cpu_step("sew-resnet18");
}

#[test]
fn spiking_resnet18_trains_one_cpu_step() {
    cpu_step("spiking-resnet18");
}

#[test]
fn spiking_vgg11_bn_trains_one_cpu_step() {
    cpu_step("spiking-vgg11-bn");
}

/// Runs child `path` of `model` (a leaf of the module tree) under its own path.
fn run<'m>(cx: &mut Cx<'m>, model: &'m Model, path: &str, x: Var) -> Var {
    let mut out = cx.call(path, model.module(path).unwrap(), vec![x]).unwrap();
    assert_eq!(out.len(), 1);
    out.pop().unwrap()
}

/// ResNet-18's forward written out from SpikingJelly's `_forward_impl` and `BasicBlock.forward`
/// (spiking: `sn2(bn2(conv2(..)) + identity)`; SEW ADD: `identity + sn2(bn2(conv2(..)))` with
/// `identity = downsample_sn(downsample(x))` when downsampling), calling the model's own
/// layers one by one.
fn reference_resnet18<'m>(cx: &mut Cx<'m>, model: &'m Model, x: Var, sew: bool) -> Var {
    let mut x = x;
    for p in ["conv1", "bn1", "sn1", "maxpool"] {
        x = run(cx, model, p, x);
    }
    for layer in 1..=4 {
        for block in 0..2 {
            let b = format!("layer{layer}.{block}");
            let mut out = x.clone();
            for c in ["conv1", "bn1", "sn1", "conv2", "bn2"] {
                out = run(cx, model, &format!("{b}.{c}"), out);
            }
            let downsample = layer > 1 && block == 0;
            let mut identity = x;
            if downsample {
                for c in ["downsample.0", "downsample.1"] {
                    identity = run(cx, model, &format!("{b}.{c}"), identity);
                }
            }
            x = if sew {
                out = run(cx, model, &format!("{b}.sn2"), out);
                // (Absent when this wiring is tried on the spiking ResNet, for contrast.)
                let sn = format!("{b}.downsample_sn");
                if downsample && model.module(&sn).is_some() {
                    identity = run(cx, model, &sn, identity);
                }
                ops::add(cx, &identity, &out).unwrap()
            } else {
                let sum = ops::add(cx, &out, &identity).unwrap();
                run(cx, model, &format!("{b}.sn2"), sum)
            };
        }
    }
    x = run(cx, model, "avgpool", x);
    let d = x.dims().to_vec();
    x = ops::reshape(cx, &x, vec![d[0], d[1], d[2] * d[3] * d[4]]).unwrap();
    run(cx, model, "fc", x)
}

fn bits(v: &Var) -> Vec<u32> {
    v.tensor()
        .unwrap()
        .to_vec_f32()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

#[test]
fn resnet_forwards_match_spikingjelly_wiring() {
    let mut outputs = Vec::new();
    for (name, sew) in [("sew-resnet18", true), ("spiking-resnet18", false)] {
        // 64x64 and T = 4: layer4's BatchNorm normalises 2x2 x T x N = 32 values per channel.
        // (At 32x32 with T x N = 4 it sees 4 values, which normalise to at most sqrt(3) < 2,
        // too little for a LIF (tau 2) to fire, so SEW's layer4 would output zeros.)
        let model = build(name, &spec(4, &[3, 64, 64], 10), Device::Cpu);
        let input = batch(&model, 2, 4).input;
        let mut cx = Cx::new(
            Device::Cpu,
            model.policies(),
            Philox::new(5),
            Recording::Off,
            true,
        );
        let x = cx.leaf(input.clone(), false);
        let got = bits(&model.forward(&mut cx, x).unwrap());
        let mut per_wiring = Vec::new();
        for reference_sew in [true, false] {
            let mut cx = Cx::new(
                Device::Cpu,
                model.policies(),
                Philox::new(5),
                Recording::Off,
                true,
            );
            let x = cx.leaf(input.clone(), false);
            per_wiring.push(bits(&reference_resnet18(&mut cx, &model, x, reference_sew)));
        }
        let (own, other) = if sew {
            (&per_wiring[0], &per_wiring[1])
        } else {
            (&per_wiring[1], &per_wiring[0])
        };
        assert_eq!(&got, own, "{name} follows its own wiring");
        assert_ne!(
            &got, other,
            "{name}: the two wirings give different outputs on this input"
        );
        let rows: Vec<&[u32]> = got.chunks(10).collect();
        assert!(
            rows.iter().any(|r| r != &rows[0]),
            "{name}: the output depends on the input"
        );
        outputs.push(got);
    }
    // Same seed, same parameters (LIF has none): only the wiring differs.
    assert_ne!(outputs[0], outputs[1]);
}

/// Every BasicBlock checkpointed with bit-packed spike inputs, the stem's neuron checkpointed in
/// two time chunks, and layer4.0 split into its children: the step is bit-identical to storing
/// everything (two steps, so the second runs on updated parameters and momentum).
fn checkpointed_blocks_are_exact(name: &str) {
    let build = || build(name, &zoo::entry(name).unwrap().small, Device::Cpu);
    let baseline = fingerprint(&build(), 2, 2);
    let mut model = build();
    let mut entries: Vec<(String, Policy)> = (1..=4)
        .flat_map(|l| (0..2).map(move |b| format!("layer{l}.{b}")))
        .map(|p| (p, Policy::CHECKPOINT))
        .collect();
    entries.push(("sn1".into(), Policy::checkpoint(CompressorKind::BitSpike, 2)));
    model.apply_plan(&Plan::from_entries(entries)).unwrap();
    model.split_policy("layer4.0").unwrap();
    assert!(model.policies().get("layer4.0").is_none());
    assert_eq!(model.policies().get("layer4.0.conv1"), Some(&Policy::CHECKPOINT));
    assert_eq!(fingerprint(&model, 2, 2), baseline, "{name}");
}

#[test]
fn sew_resnet18_checkpointed_blocks_are_exact() {
    checkpointed_blocks_are_exact("sew-resnet18");
}

#[test]
fn spiking_resnet18_checkpointed_blocks_are_exact() {
    checkpointed_blocks_are_exact("spiking-resnet18");
}

fn invalid_input(name: &str, s: &InputSpec) -> String {
    match zoo::build(name, s, Device::META, 0) {
        Err(e @ CheckpointError::InvalidInput(_)) => e.to_string(),
        Err(e) => panic!("{name} {s:?}: wrong error {e}"),
        Ok(_) => panic!("{name} {s:?}: accepted"),
    }
}

#[test]
fn specs_the_models_cannot_take_are_rejected_clearly() {
    for name in NEW_MODELS {
        let e = invalid_input(name, &spec(2, &[3, 31, 32], 10));
        assert!(
            e.contains(name) && e.contains("H, W >= 32") && e.contains("31x32"),
            "{e}"
        );
        let e = invalid_input(name, &spec(2, &[3, 64, 16], 10));
        assert!(e.contains("64x16"), "{e}");
        let e = invalid_input(name, &spec(2, &[32, 32], 10));
        assert!(
            e.contains(name) && e.contains("[C, H, W]") && e.contains("[32, 32]"),
            "{e}"
        );
        let e = invalid_input(name, &spec(2, &[1, 3, 32, 32], 10));
        assert!(e.contains("[C, H, W]"), "{e}");
        let e = invalid_input(name, &spec(0, &[3, 32, 32], 10));
        assert!(e.contains("T >= 1"), "{e}");
        let e = invalid_input(name, &spec(2, &[3, 32, 32], 0));
        assert!(e.contains("classes >= 1"), "{e}");
    }
}
