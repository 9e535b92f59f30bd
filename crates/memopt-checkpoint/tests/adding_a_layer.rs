//! Adding a layer, the whole of it: a leaky ReLU built from existing ops, its test, and plans
//! that checkpoint it. `docs/models.md` points here.

mod common;

use common::{assert_exact_and_meta_matches_cpu, eval_values};
use memopt_checkpoint::module::{Init, Linear, Module, Neuron, PlannerHints, Sequential};
use memopt_checkpoint::{Cx, Forward, InputSpec, Model, Plan, Policy, Var, ops};
use memopt_core::{Device, MemoryKind, Tensor};

/// `max(x, 0) + slope * min(x, 0)`: only `type_name` and `forward` are required, and the
/// planner hints' defaults fit a stateless layer.
struct LeakyRelu {
    slope: f32,
}

impl Module for LeakyRelu {
    fn type_name(&self) -> &'static str {
        "LeakyReLU"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = &inputs[0];
        let positive = ops::relu(cx, x)?;
        let flipped = ops::scale(cx, x, -1.0)?;
        let negative = ops::relu(cx, &flipped)?;
        let negative = ops::scale(cx, &negative, -self.slope)?;
        Ok(vec![ops::add(cx, &positive, &negative)?])
    }
}

impl PlannerHints for LeakyRelu {}

/// Linear - LeakyReLU - LIF - Linear over 4 time steps of 6 features.
fn model(device: Device) -> Model {
    let mut init = Init::new(device, 5);
    let root = Sequential::new()
        .push_named("fc1", Linear::new(&mut init, 6, 8, true).unwrap())
        .push_named("act", LeakyRelu { slope: 0.1 })
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap())
        .push_named("fc2", Linear::new(&mut init, 8, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![6],
        classes: 3,
    };
    Model::new("leaky", Box::new(root), spec, device)
}

#[test]
fn the_layer_computes_a_leaky_relu() {
    let spec = InputSpec {
        time_steps: 1,
        sample: vec![4],
        classes: 1,
    };
    let model = Model::new("one", Box::new(LeakyRelu { slope: 0.1 }), spec, Device::Cpu);
    let x = Tensor::from_vec(
        vec![-2.0f32, -0.5, 0.0, 3.0],
        [1, 1, 4],
        Device::Cpu,
        MemoryKind::Input,
    );
    assert_eq!(
        eval_values(&model, x.unwrap()),
        [-2.0 * 0.1, -0.5 * 0.1, 0.0, 3.0]
    );
}

#[test]
fn plans_over_the_layer_are_exact_and_meta_predicts_the_cpu() {
    for plan in [
        Plan::from_entries([("act", Policy::CHECKPOINT)]),
        Plan::from_entries([("sn", Policy::CHECKPOINT)]),
    ] {
        assert_exact_and_meta_matches_cpu(model, &plan, 3);
    }
}
