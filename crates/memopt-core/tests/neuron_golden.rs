//! The neuron kernels reproduce SpikingJelly 2.0.0 (computed in float64 with PyTorch): spikes
//! exactly, final membrane potential, input gradient of `sum(spikes * grad_y)` and PLIF's
//! `grad_w` to 1e-5 relative (absolute floor 1e-6). Data: `tests/data/neurons.json`, a copy of
//! the project's golden file (see its README in the shared golden directory).

use memopt_core::kernels::{
    NeuronBackward, NeuronConfig, NeuronKind, Surrogate, neuron_backward, neuron_forward,
};
use memopt_core::{Device, MemoryKind, Tensor};
use serde_json::Value;

fn tensor(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let shape = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap())
        .collect();
    (shape, data)
}

fn to_tensor(v: &Value) -> Tensor {
    let (shape, data) = tensor(v);
    let data = data.into_iter().map(|d| d as f32).collect::<Vec<_>>();
    Tensor::from_vec(data, shape, Device::Cpu, MemoryKind::Input).unwrap()
}

fn config(case: &Value) -> NeuronConfig {
    let f = |k: &str| case[k].as_f64().unwrap() as f32;
    let decay_input = case["decay_input"].as_bool().unwrap();
    let kind = match case["kind"].as_str().unwrap() {
        "lif" => NeuronKind::Lif {
            tau: f("tau"),
            decay_input,
        },
        "if" => NeuronKind::If,
        "plif" => NeuronKind::Plif { decay_input },
        other => panic!("unknown neuron kind {other}"),
    };
    let alpha = f("alpha");
    let surrogate = match case["surrogate"].as_str().unwrap() {
        "sigmoid" => Surrogate::Sigmoid { alpha },
        "atan" => Surrogate::ATan { alpha },
        other => panic!("unknown surrogate {other}"),
    };
    NeuronConfig {
        kind,
        v_threshold: f("v_threshold"),
        v_reset: case["v_reset"].as_f64().map(|v| v as f32),
        detach_reset: case["detach_reset"].as_bool().unwrap(),
        surrogate,
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = (1e-5 * w.abs()).max(1e-6);
        assert!((g as f64 - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

#[test]
fn neurons_match_spikingjelly() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/neurons.json")).unwrap();
    let golden: Value = serde_json::from_str(&text).unwrap();
    let cases = golden["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    let mut kinds_seen = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let cfg = config(case);
        cfg.validate().unwrap();
        kinds_seen.push(case["kind"].as_str().unwrap().to_string());
        let what = |name: &str| format!("case {i} ({cfg:?}) {name}");
        let x = to_tensor(&case["x"]);
        // SpikingJelly initialises PLIF's w to -ln(init_tau - 1).
        let w = matches!(cfg.kind, NeuronKind::Plif { .. }).then(|| {
            let init_tau = case["tau"].as_f64().unwrap();
            let w0 = -(init_tau - 1.0).ln();
            Tensor::from_vec(vec![w0 as f32], [1], Device::Cpu, MemoryKind::Parameter).unwrap()
        });
        let out = neuron_forward(&cfg, &x, None, w.as_ref(), true).unwrap();
        let (_, want_spikes) = tensor(&case["spikes"]);
        let want_spikes: Vec<f32> = want_spikes.iter().map(|&s| s as f32).collect();
        assert_eq!(
            out.spikes.to_vec_f32().unwrap(),
            want_spikes,
            "{}",
            what("spikes")
        );
        assert!(want_spikes.contains(&1.0) && want_spikes.contains(&0.0));
        let (_, v_final) = tensor(&case["v_final"]);
        assert_close(&what("v_final"), &out.v_final.to_vec_f32().unwrap(), &v_final);

        let grad_y = to_tensor(&case["grad_y"]);
        let h_seq = out.h_seq.unwrap();
        let grads = neuron_backward(NeuronBackward {
            cfg: &cfg,
            grad_spikes: (&grad_y).into(),
            grad_v_final: None,
            h_seq: &h_seq,
            v_init: None,
            w: w.as_ref(),
            want_v_init_grad: false,
            w_acc: None,
        })
        .unwrap();
        let (_, grad_x) = tensor(&case["grad_x"]);
        assert_close(&what("grad_x"), &grads.x.to_vec_f32().unwrap(), &grad_x);
        match case.get("grad_w") {
            Some(gw) => {
                let got = grads.w.expect("PLIF returns grad_w").to_vec_f32().unwrap();
                assert_close(&what("grad_w"), &got, &[gw.as_f64().unwrap()]);
            }
            None => assert!(grads.w.is_none()),
        }
    }
    for k in ["lif", "if", "plif"] {
        assert!(kinds_seen.iter().any(|s| s == k), "no {k} case");
    }
}
