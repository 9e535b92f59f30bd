//! SpikingJelly 2.0.0 reference values (float64 on the CPU, see tests/data) reproduced through
//! modules and autograd in f32: losses and gradients to 1e-5 relative (plus 1e-6 of each
//! tensor's largest magnitude, for elements that are small by cancellation), spikes exactly.

use memopt_checkpoint::module::{BatchNorm, Conv2d, Init, Neuron, Sequential};
use memopt_checkpoint::{Batch, InputSpec, Model, StepOptions, Target, Trainer, optim::Sgd, zoo};
use memopt_core::kernels::{self, Conv2dParams, NeuronConfig, NeuronKind, Surrogate};
use memopt_core::{Device, MemoryKind, Tensor};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tensor(v: &Value, kind: MemoryKind) -> Tensor {
    let dims: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data: Vec<f32> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    Tensor::from_vec(data, dims, Device::Cpu, kind).unwrap()
}

fn assert_close(name: &str, got: &Tensor, want: &Value) {
    let want: Vec<f64> = want["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let got = got.to_vec_f32().unwrap();
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
    if std::env::var("GOLDEN_STATS").is_ok() {
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs() / (w.abs() + 0.1 * scale))
            .fold(0f64, f64::max);
        eprintln!("{name}: worst relative error {worst:.3e} (scale {scale:.3e})");
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // allclose: 1e-5 relative, plus 1e-6 of the tensor's largest magnitude for elements
        // that are small because of cancellation.
        let tol = 1e-5 * w.abs() + 1e-6 * scale.max(1e-6);
        assert!((*g as f64 - w).abs() <= tol, "{name}[{i}]: got {g}, want {w}");
    }
}

fn set(model: &Model, path: &str, value: &Value) {
    let (_, p) = model
        .params()
        .into_iter()
        .find(|(n, _)| n == path)
        .unwrap_or_else(|| panic!("no param {path}"));
    kernels::assign(p.tensor(), &tensor(value, MemoryKind::Input)).unwrap();
}

fn grad<'a>(model: &Model, out: &'a memopt_checkpoint::StepOutput, path: &str) -> &'a Tensor {
    let (_, p) = model.params().into_iter().find(|(n, _)| n == path).unwrap();
    out.grads.as_ref().unwrap().get(p.id()).unwrap()
}

#[test]
fn mlp_cross_entropy_matches_spikingjelly() {
    let g = load("mlp_ce.json");
    let spec = zoo::entry("spiking-mlp").unwrap().small;
    let model = zoo::build("spiking-mlp", &spec, Device::Cpu, 0).unwrap();
    for (path, key) in [
        ("0.weight", "fc1_weight"),
        ("0.bias", "fc1_bias"),
        ("2.weight", "fc2_weight"),
        ("2.bias", "fc2_bias"),
    ] {
        set(&model, path, &g[key]);
    }
    let labels: Vec<i64> = g["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect();
    let batch = Batch {
        input: tensor(&g["x"], MemoryKind::Input),
        target: Target::Labels(Tensor::from_vec(labels, [5], Device::Cpu, MemoryKind::Input).unwrap()),
    };
    let mut trainer = Trainer::new(Box::new(Sgd::plain(&model, 0.1).unwrap()), 0);
    let opts = StepOptions {
        keep_grads: true,
        skip_update: true,
        ..Default::default()
    };
    let out = trainer.step(&model, &batch, opts).unwrap();
    let loss = out.loss.unwrap() as f64;
    let want = g["loss"].as_f64().unwrap();
    assert!((loss - want).abs() <= 1e-5 * want.abs(), "loss {loss} vs {want}");
    for (path, key) in [
        ("0.weight", "grad_fc1_weight"),
        ("0.bias", "grad_fc1_bias"),
        ("2.weight", "grad_fc2_weight"),
        ("2.bias", "grad_fc2_bias"),
    ] {
        assert_close(key, grad(&model, &out, path), &g[key]);
    }
}

/// conv3x3 (no bias) -> BatchNorm2d -> LIF(tau 2, detach_reset, ATan) on [T=3, N=2, 3, 5, 5]
/// spikes, backward of sum(spikes * grad_y).
#[test]
fn conv_bn_lif_matches_spikingjelly() {
    let g = load("conv_bn_lif.json");
    let mut init = Init::new(Device::Cpu, 0);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let lif = NeuronConfig {
        kind: NeuronKind::Lif {
            tau: 2.0,
            decay_input: true,
        },
        detach_reset: true,
        surrogate: Surrogate::ATan { alpha: 2.0 },
        ..NeuronConfig::lif(2.0)
    };
    let root = Sequential::new()
        .push(Conv2d::new(&mut init, 3, 4, 3, pad1, false).unwrap())
        .push(BatchNorm::new_2d(&mut init, 4).unwrap())
        .push(Neuron::new(&mut init, lif, 2.0).unwrap());
    let spec = InputSpec {
        time_steps: 3,
        sample: vec![3, 5, 5],
        classes: 4,
    };
    let model = Model::new("conv-bn-lif", Box::new(root), spec, Device::Cpu);
    set(&model, "0.weight", &g["conv_weight"]);
    set(&model, "1.weight", &g["bn_weight"]);
    set(&model, "1.bias", &g["bn_bias"]);

    // The loss sum(spikes * grad_y) through the public autograd API.
    let policies = model.policies().clone();
    let mut cx = memopt_checkpoint::Cx::new(
        Device::Cpu,
        &policies,
        memopt_core::Philox::new(0),
        memopt_checkpoint::Recording::On,
        true,
    );
    let x = cx.leaf(tensor(&g["x"], MemoryKind::Input).with_spike_flag(true), true);
    let x_id = x.id().unwrap();
    let spikes = model.forward(&mut cx, x).unwrap();
    let gy = cx.leaf(tensor(&g["grad_y"], MemoryKind::Input), false);
    let weighted = memopt_checkpoint::ops::mul(&mut cx, &spikes, &gy).unwrap();
    let loss = memopt_checkpoint::ops::sum_all(&mut cx, &weighted).unwrap();
    assert_eq!(
        spikes.tensor().unwrap().to_vec_f32().unwrap(),
        tensor(&g["spikes"], MemoryKind::Input).to_vec_f32().unwrap()
    );
    let mut leaves = cx.backward(&loss).unwrap();
    assert_close("grad_x", &leaves.remove(&x_id).unwrap(), &g["grad_x"]);
    let grads = cx.take_grads();
    let param = |path: &str| {
        model
            .params()
            .into_iter()
            .find(|(n, _)| n == path)
            .unwrap()
            .1
            .id()
    };
    assert_close(
        "grad_conv_weight",
        grads.get(param("0.weight")).unwrap(),
        &g["grad_conv_weight"],
    );
    assert_close(
        "grad_bn_weight",
        grads.get(param("1.weight")).unwrap(),
        &g["grad_bn_weight"],
    );
    assert_close(
        "grad_bn_bias",
        grads.get(param("1.bias")).unwrap(),
        &g["grad_bn_bias"],
    );
    let bn = model.buffers();
    assert_close("bn_running_mean", bn[0].1.tensor(), &g["bn_running_mean"]);
    assert_close("bn_running_var", bn[1].1.tensor(), &g["bn_running_var"]);
}
