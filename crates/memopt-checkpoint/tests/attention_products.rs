//! Batched matrix products inside a model: an attention block whose plans are bit-identical to
//! storing everything, with Meta's peaks equal to the CPU's.

mod common;

use common::assert_exact_and_meta_matches_cpu;
use memopt_checkpoint::module::{Flatten, Init, Linear, Module, Neuron, PlannerHints, Sequential};
use memopt_checkpoint::{Cx, Forward, InputSpec, Model, Plan, Policy, Var, ops};
use memopt_core::Device;
use memopt_core::kernels::Transposed;

/// Queries, keys and values from one linear map each, and `y = (Q K^T) V / 8` over the tokens
/// of each time step and sample.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
}

impl Module for Attention {
    fn type_name(&self) -> &'static str {
        "Attention"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = inputs.into_iter().next().expect("one input");
        let q = cx.call1("q", &self.q, x.clone())?;
        let k = cx.call1("k", &self.k, x.clone())?;
        let v = cx.call1("v", &self.v, x)?;
        // Items of [L, D]: scores [L, L], then [L, D].
        let scores = ops::batched_matmul(cx, &q, &k, Transposed { a: false, b: true })?;
        let y = ops::batched_matmul(cx, &scores, &v, Transposed::default())?;
        Ok(vec![ops::scale(cx, &y, 0.125)?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("q".into(), &self.q),
            ("k".into(), &self.k),
            ("v".into(), &self.v),
        ]
    }
}

impl PlannerHints for Attention {}

/// Attention - LIF - Flatten - Linear over 4 time steps of 5 tokens of 6 features.
fn model(device: Device) -> Model {
    let mut init = Init::new(device, 11);
    let (tokens, features) = (5, 6);
    let attention = Attention {
        q: Linear::new(&mut init, features, features, false).unwrap(),
        k: Linear::new(&mut init, features, features, false).unwrap(),
        v: Linear::new(&mut init, features, features, true).unwrap(),
    };
    let root = Sequential::new()
        .push_named("attn", attention)
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap())
        .push_named("flat", Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, tokens * features, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![tokens, features],
        classes: 3,
    };
    Model::new("attention", Box::new(root), spec, device)
}

#[test]
fn plans_over_attention_are_exact_and_meta_predicts_the_cpu() {
    for plan in [
        Plan::default(),
        Plan::from_entries([("attn", Policy::CHECKPOINT)]),
        Plan::from_entries([("attn", Policy::CHECKPOINT), ("sn", Policy::CHECKPOINT)]),
    ] {
        assert_exact_and_meta_matches_cpu(model, &plan, 3);
    }
}

#[test]
fn gradients_reach_queries_keys_and_values_through_both_products() {
    let print = common::fingerprint(&model(Device::Cpu), 1, 3);
    for name in ["attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.v.bias"] {
        let (_, g) = print
            .grads
            .iter()
            .find(|(p, _)| p == name)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        assert!(
            g.iter().any(|&b| f32::from_bits(b) != 0.0),
            "{name}'s gradient is all zeros"
        );
    }
}
