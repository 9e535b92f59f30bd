//! The model zoo: exact architectures (layer for layer, SpikingJelly's module names) of the
//! headline workloads. Every constructor takes the input spec (time steps, sample shape,
//! classes), a device and a seed.

mod cifar10dvs_vgg;
mod mlp;

use crate::model::{InputSpec, Model};
use crate::{CheckpointError, Result};
use memopt_core::Device;

/// A zoo model: its CLI name, what it is, and its default and small input specs.
#[derive(Debug, Clone)]
pub struct ZooEntry {
    /// Name used by the CLI and benchmarks.
    pub name: &'static str,
    /// One line on what it is.
    pub description: &'static str,
    /// The input of the published workload.
    pub default: InputSpec,
    /// A small input for tests and quick runs on a CPU.
    pub small: InputSpec,
}

type Builder = fn(&InputSpec, Device, u64) -> Result<Model>;

fn spec(time_steps: usize, sample: &[usize], classes: usize) -> InputSpec {
    InputSpec {
        time_steps,
        sample: sample.to_vec(),
        classes,
    }
}

fn registry() -> Vec<(ZooEntry, Builder)> {
    vec![
        (
            ZooEntry {
                name: "cifar10dvs-vgg",
                description: "SpikingJelly memopt example: 8 blocks of [AvgPool] Conv3x3-BN-LIF on CIFAR10-DVS",
                default: spec(10, &[2, 48, 48], 10),
                small: spec(4, &[2, 48, 48], 10),
            },
            cifar10dvs_vgg::build,
        ),
        (
            ZooEntry {
                name: "toy-if",
                description: "three blocks of Linear-IF-Linear-IF (C=512) and a Linear head",
                default: spec(16, &[512], 10),
                small: spec(4, &[64], 10),
            },
            mlp::build_toy_if,
        ),
        (
            ZooEntry {
                name: "spiking-mlp",
                description: "Linear(16,32)-LIF-Linear(32,10), the golden mlp_ce network",
                default: spec(4, &[16], 10),
                small: spec(4, &[16], 10),
            },
            mlp::build_spiking_mlp,
        ),
    ]
}

/// Every zoo model, in CLI order.
pub fn entries() -> Vec<ZooEntry> {
    registry().into_iter().map(|(e, _)| e).collect()
}

/// The zoo entry named `name`.
pub fn entry(name: &str) -> Result<ZooEntry> {
    registry()
        .into_iter()
        .map(|(e, _)| e)
        .find(|e| e.name == name)
        .ok_or_else(|| unknown(name))
}

fn unknown(name: &str) -> CheckpointError {
    let names: Vec<&str> = registry().iter().map(|(e, _)| e.name).collect();
    CheckpointError::InvalidInput(format!(
        "unknown model '{name}': the zoo has {}",
        names.join(", ")
    ))
}

/// Builds zoo model `name` for `spec` on `device`, parameters drawn from stream `seed`.
pub fn build(name: &str, spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    let (_, builder) = registry()
        .into_iter()
        .find(|(e, _)| e.name == name)
        .ok_or_else(|| unknown(name))?;
    if spec.time_steps == 0 || spec.classes == 0 || spec.sample.contains(&0) {
        return Err(CheckpointError::InvalidInput(format!(
            "model '{name}' needs T >= 1, classes >= 1 and a non-empty sample shape, got T={}, classes={}, sample={:?}",
            spec.time_steps, spec.classes, spec.sample
        )));
    }
    builder(spec, device, seed)
}

/// Checks that `spec.sample` has `rank` dimensions, with the model's name in the error.
pub(crate) fn expect_sample(name: &str, spec: &InputSpec, layout: &str, rank: usize) -> Result<()> {
    if spec.sample.len() != rank {
        return Err(CheckpointError::InvalidInput(format!(
            "model '{name}' takes samples of shape [{layout}], got {:?}",
            spec.sample
        )));
    }
    Ok(())
}
