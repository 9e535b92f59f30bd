//! Weights memopt generates from a seed, saved as safetensors, were loaded by SpikingJelly
//! 2.0 with `strict=True` (tools/fixtures/weights.py); the fixture holds only SpikingJelly's
//! outputs. Here the same file is loaded into a differently seeded memopt model, which must
//! then give the same spikes (exactly), logits (within 1e-5 relative) and BatchNorm running
//! statistics after the step. Files of another architecture are rejected, nothing loaded.

#[path = "common/sj_models.rs"]
mod sj_models;

use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::{Batch, Cx, Model, Recording, StepOptions, Target, Trainer, Var, ops};
use memopt_core::kernels::SgdConfig;
use memopt_core::{Device, MemoryKind, Philox, Tensor};
use memopt_data::npy::NpyArray;
use memopt_data::npz;
use memopt_data::weights::{WeightsInfo, load_model, save_model};
use std::path::Path;

/// A fresh temporary directory, removed with everything in it when dropped (also when the test
/// fails).
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("memopt-data-weights-")
        .tempdir()
        .unwrap()
}

/// Module paths run one after the other (`flatten` = `torch.flatten(x, 2)` in the forward,
/// `tokens` = the Spikformer's `[T, N, C, H, W]` -> `[T, N, C, H * W]`).
fn chain(stem: &str) -> Vec<&'static str> {
    match stem {
        "spike_driven" => vec![
            "patch_embed",
            "blocks.0.attn",
            "blocks.0.mlp",
            "blocks.1.attn",
            "blocks.1.mlp",
            "tokens",
            "token_mean",
            "head_lif",
            "time_mean",
            "head",
        ],
        "spikformer" => vec![
            "patch_embed.stages.0",
            "patch_embed.stages.1",
            "patch_embed.stages.2",
            "patch_embed.stages.3",
            "patch_embed.positional_encoding",
            "tokens",
            "blocks.0",
            "blocks.1",
            "token_mean",
            "head",
        ],
        "vgg" => vec![
            "features.0",
            "features.1",
            "features.2",
            "features.3",
            "features.4",
            "features.5",
            "features.6",
            "features.7",
            "features.8",
            "flatten",
            "classifier.1",
        ],
        _ => vec![
            "conv1", "bn1", "sn1", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "flatten",
            "fc",
        ],
    }
}

/// Runs the chain in training mode (batch statistics) without dropout, returning every
/// module's output by path.
fn run(model: &Model, stem: &str, input: Tensor) -> Vec<(String, Vec<f32>)> {
    let mut cx = Cx::new(
        Device::Cpu,
        model.policies(),
        Philox::new(0),
        Recording::Off,
        true,
    );
    let mut x: Var = cx.leaf(input, false);
    let mut outs = Vec::new();
    for path in chain(stem) {
        x = if path == "flatten" && model.module(path).is_none() {
            let d = x.dims().to_vec();
            ops::reshape(&mut cx, &x, vec![d[0], d[1], d[2..].iter().product()]).unwrap()
        } else if path == "tokens" {
            let d = x.dims().to_vec();
            ops::reshape(&mut cx, &x, vec![d[0], d[1], d[2], d[3..].iter().product()]).unwrap()
        } else {
            let m = model.module(path).unwrap_or_else(|| panic!("no module {path}"));
            cx.call1(path, m, x).unwrap()
        };
        outs.push((path.to_string(), x.tensor().unwrap().to_vec_f32().unwrap()));
    }
    outs
}

/// SpikingJelly's labels of the gradient pass (tools/fixtures/weights.py's `LABELS`).
const LABELS: [i64; 2] = [3, 7];

/// Where the fixture holds gradients (`grad.NAME`): one step's loss (cross-entropy of the
/// output averaged over time) within 1e-5 and each named gradient within 1e-4 of its largest
/// magnitude, against SpikingJelly's backward through the same surrogate.
fn check_gradients(
    model: &Model,
    stem: &str,
    spec: &memopt_checkpoint::InputSpec,
    want: &[(String, NpyArray)],
) {
    let grads: Vec<(&str, Vec<f32>)> = want
        .iter()
        .filter_map(|(k, a)| k.strip_prefix("grad.").map(|n| (n, a.to_f32())))
        .collect();
    if grads.is_empty() {
        return;
    }
    let (dims, data) = sj_models::fixed_input(spec);
    let batch = Batch {
        input: Tensor::from_vec(data, dims, Device::Cpu, MemoryKind::Input).unwrap(),
        target: Target::Labels(
            Tensor::from_vec(LABELS.to_vec(), [2], Device::Cpu, MemoryKind::Input).unwrap(),
        ),
    };
    let sgd = Sgd::new(
        model,
        SgdConfig {
            lr: 0.1,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        },
    )
    .unwrap();
    let opts = StepOptions {
        keep_grads: true,
        skip_update: true,
        ..StepOptions::default()
    };
    let out = Trainer::new(Box::new(sgd), 0).step(model, &batch, opts).unwrap();
    let loss = want.iter().find(|(k, _)| k == "loss").unwrap().1.to_f32()[0];
    let got = out.loss.unwrap();
    assert!(
        (got - loss).abs() <= 1e-5 * loss.abs(),
        "{stem}: loss {got} against {loss}"
    );
    let params = model.params();
    let computed = out.grads.unwrap();
    for (name, g) in grads {
        let p = params
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{stem}: no {name}"))
            .1;
        let ours = computed.get(p.id()).unwrap().to_vec_f32().unwrap();
        let rel = max_rel(&ours, &g);
        assert!(
            rel <= 1e-4,
            "{stem}: the gradient of {name} differs by {rel} relative"
        );
        assert!(
            g.iter().any(|&v| v != 0.0),
            "{stem}: {name}'s gradient is zero, a weak test"
        );
    }
}

fn fixture(stem: &str) -> Vec<(String, NpyArray)> {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/weights/{stem}_spikingjelly.npz"));
    npz::read(&p).unwrap()
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn spikingjelly_outputs_are_reproduced_from_the_exchanged_weights() {
    let dir = temp_dir();
    for (name, stem, spec) in sj_models::cases() {
        let seeded = sj_models::seeded_model(name, &spec);
        let file = dir.path().join(format!("{stem}.safetensors"));
        save_model(&file, &seeded, &WeightsInfo::default()).unwrap();
        drop(seeded);
        // a model with other weights, then the file: everything must come from the file
        let model = sj_models::build(name, &spec, 999);
        load_model(&file, &model).unwrap();
        let (dims, data) = sj_models::fixed_input(&spec);
        let input = Tensor::from_vec(data, dims, Device::Cpu, MemoryKind::Input).unwrap();
        let outs = run(&model, stem, input);
        let want = fixture(stem);
        let (mut layers, mut spiking_layers) = (0, 0);
        for (key, arr) in &want {
            if let Some(path) = key.strip_prefix("out.") {
                let got = &outs.iter().find(|(p, _)| p == path).unwrap().1;
                assert_eq!(
                    got,
                    &arr.to_f32(),
                    "{stem}: output of {path} differs from SpikingJelly's"
                );
                layers += 1;
                spiking_layers += usize::from(got.iter().any(|&v| v != 0.0));
            }
            if let Some(path) = key.strip_prefix("val.") {
                let got = &outs.iter().find(|(p, _)| p == path).unwrap().1;
                let rel = max_rel(got, &arr.to_f32());
                assert!(rel <= 1e-5, "{stem}: output of {path} differs by {rel} relative");
                layers += 1;
                spiking_layers += 1;
            }
        }
        assert!(layers >= 5, "{stem}: the fixture compares {layers} layers");
        assert_eq!(spiking_layers, layers, "{stem}: a silent layer makes a weak test");
        let logits = &outs.last().unwrap().1;
        let want_logits = want.iter().find(|(k, _)| k == "logits").unwrap().1.to_f32();
        let rel = max_rel(logits, &want_logits);
        assert!(rel <= 1e-5, "{stem}: logits differ by {rel} relative");
        for (key, arr) in &want {
            if let Some(buffer) = key.strip_prefix("after.") {
                let got = model.buffers().into_iter().find(|(n, _)| n == buffer).unwrap().1;
                let rel = max_rel(&got.tensor().to_vec_f32().unwrap(), &arr.to_f32());
                assert!(
                    rel <= 1e-5,
                    "{stem}: {buffer} after the step differs by {rel} relative"
                );
            }
        }
        // After the running statistics: the gradient pass updates them again.
        check_gradients(&model, stem, &spec, &want);
    }
}

/// The zoo's transformers at their published sizes name and shape every tensor as
/// SpikingJelly's `state_dict()` does (tools/fixtures/weights.py wrote them).
#[test]
fn transformer_state_dict_names_and_shapes_are_spikingjellys() {
    for name in ["spikformer-cifar10", "spike-driven-transformer"] {
        let entry = memopt_checkpoint::zoo::entry(name).unwrap();
        let model = memopt_checkpoint::zoo::build(name, &entry.published, Device::META, 0).unwrap();
        let mut ours: Vec<(String, Vec<usize>)> = model
            .params()
            .into_iter()
            .map(|(n, p)| (n, p.tensor().dims().to_vec()))
            .chain(
                model
                    .buffers()
                    .into_iter()
                    .map(|(n, b)| (n, b.tensor().dims().to_vec())),
            )
            .collect();
        let batch_norms: Vec<String> = ours
            .iter()
            .filter_map(|(n, _)| n.strip_suffix(".running_mean").map(str::to_string))
            .collect();
        ours.extend(
            batch_norms
                .into_iter()
                .map(|bn| (format!("{bn}.num_batches_tracked"), vec![])),
        );
        ours.sort();
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/weights/{name}_state_dict.json"));
        let theirs: std::collections::BTreeMap<String, Vec<usize>> =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let theirs: Vec<(String, Vec<usize>)> = theirs.into_iter().collect();
        assert_eq!(ours.len(), theirs.len(), "{name}");
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a, b, "{name}");
        }
    }
}

fn snapshot(model: &Model) -> Vec<Vec<f32>> {
    let mut v: Vec<Vec<f32>> = model
        .params()
        .iter()
        .map(|(_, p)| p.tensor().to_vec_f32().unwrap())
        .collect();
    v.extend(
        model
            .buffers()
            .iter()
            .map(|(_, b)| b.tensor().to_vec_f32().unwrap()),
    );
    v
}

#[test]
fn a_file_of_another_architecture_is_rejected_with_the_mismatches_and_nothing_loaded() {
    let small = |hw: usize| memopt_checkpoint::InputSpec {
        time_steps: 1,
        sample: vec![2, hw, hw],
        classes: 10,
    };
    let vgg16 = memopt_checkpoint::zoo::build("cifar10dvs-vgg", &small(16), Device::Cpu, 1).unwrap();
    let dir = temp_dir();
    let file = dir.path().join("vgg16.safetensors");
    save_model(&file, &vgg16, &WeightsInfo::default()).unwrap();
    // same architecture at another input size: only the classifier differs
    let vgg32 = memopt_checkpoint::zoo::build("cifar10dvs-vgg", &small(32), Device::Cpu, 2).unwrap();
    let before = snapshot(&vgg32);
    let e = load_model(&file, &vgg32).unwrap_err().to_string();
    assert!(
        e.contains("vgg16.safetensors") && e.contains("nothing loaded"),
        "{e}"
    );
    assert!(
        e.contains("classifier.1.weight: file has F32 [10, 512], model needs F32 [10, 2048]"),
        "{e}"
    );
    assert_eq!(snapshot(&vgg32), before, "a rejected file changed the model");
    // another architecture: missing and unexpected names, listed
    let mlp = memopt_checkpoint::zoo::build(
        "spiking-mlp",
        &memopt_checkpoint::zoo::entry("spiking-mlp").unwrap().small,
        Device::Cpu,
        3,
    )
    .unwrap();
    let before = snapshot(&mlp);
    let e = load_model(&file, &mlp).unwrap_err().to_string();
    assert!(
        e.contains("missing 0.weight") && e.contains("unexpected classifier.1.bias"),
        "{e}"
    );
    assert!(e.contains("more"), "{e}");
    assert_eq!(snapshot(&mlp), before);
    // not a safetensors file
    std::fs::write(dir.path().join("junk.safetensors"), b"not weights").unwrap();
    let e = load_model(&dir.path().join("junk.safetensors"), &mlp)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("junk.safetensors") && e.contains("not a safetensors file"),
        "{e}"
    );
}
