//! Small fully connected spiking networks: the toy Linear-IF blocks and the golden MLP.

use super::expect_sample;
use crate::Result;
use crate::model::{InputSpec, Model};
use crate::module::{Init, Linear, Neuron, Sequential};
use memopt_core::Device;
use memopt_core::kernels::NeuronConfig;

/// Three blocks of Linear(C, C)-IF-Linear(C, C)-IF on `[T, N, C]`, then Linear(C, classes).
pub(super) fn build_toy_if(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    expect_sample("toy-if", spec, "C", 1)?;
    let c = spec.sample[0];
    let mut init = Init::new(device, seed);
    let mut root = Sequential::new();
    for _ in 0..3 {
        let block = Sequential::new()
            .push(Linear::new(&mut init, c, c, true)?)
            .push(Neuron::new(&mut init, NeuronConfig::if_neuron(), 2.0)?)
            .push(Linear::new(&mut init, c, c, true)?)
            .push(Neuron::new(&mut init, NeuronConfig::if_neuron(), 2.0)?);
        root = root.push(block);
    }
    root = root.push(Linear::new(&mut init, c, spec.classes, true)?);
    Ok(Model::new("toy-if", Box::new(root), spec.clone(), device))
}

/// Linear(F, 32)-LIF(tau 2)-Linear(32, classes), the network of the golden `mlp_ce.json`.
pub(super) fn build_spiking_mlp(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    expect_sample("spiking-mlp", spec, "F", 1)?;
    let mut init = Init::new(device, seed);
    let root = Sequential::new()
        .push(Linear::new(&mut init, spec.sample[0], 32, true)?)
        .push(Neuron::lif(&mut init, 2.0)?)
        .push(Linear::new(&mut init, 32, spec.classes, true)?);
    Ok(Model::new("spiking-mlp", Box::new(root), spec.clone(), device))
}
