//! The model zoo: exact architectures (layer for layer, SpikingJelly's module names) of the
//! headline workloads. Every constructor takes the input spec (time steps, sample shape,
//! classes), a device and a seed.

mod cifar10dvs_vgg;
/// The LIF neuron of the CIFAR10-DVS VGG (SpikingJelly's memopt example), for models built
/// from its pieces.
pub use cifar10dvs_vgg::lif as cifar10dvs_vgg_lif;
pub mod custom;
mod mlp;
mod resnet;
mod spike_driven_transformer;
mod spikformer;
mod spiking_vgg;
mod token_network;
pub use spike_driven_transformer::{SpikeDrivenConfig, spike_driven_transformer};
pub use spikformer::{SpikformerConfig, spikformer};

use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::fold::flatten_from;
use crate::{CheckpointError, Result};
use memopt_core::Device;

/// A zoo model: its CLI name, what it is, and its published and small input specs.
#[derive(Debug, Clone)]
pub struct ZooEntry {
    /// Name used by the CLI and benchmarks.
    pub name: &'static str,
    /// One line on what it is.
    pub description: &'static str,
    /// The input of the published workload: time steps, sample shape and classes as the
    /// model's paper or SpikingJelly example uses them (the VGG: T=10, 2x48x48, 10 classes;
    /// the ResNets and VGG-11: T=4, 3x224x224, 1000 classes). `memopt models` lists them all.
    pub published: InputSpec,
    /// A small input for tests and quick runs on a CPU: fewer time steps and small samples
    /// (the VGG: T=4, 2x48x48; the ResNets and VGG-11: T=2, 3x32x32, 10 classes; toy-if:
    /// T=4, 64 features). `memopt models` lists them all.
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
                published: spec(10, &[2, 48, 48], 10),
                small: spec(4, &[2, 48, 48], 10),
            },
            cifar10dvs_vgg::build,
        ),
        (
            ZooEntry {
                name: "sew-resnet18",
                description: "SpikingJelly sew_resnet18 (cnf ADD, LIF tau 2), ImageNet-size input",
                published: spec(4, &[3, 224, 224], 1000),
                small: spec(2, &[3, 32, 32], 10),
            },
            resnet::build_sew_resnet18,
        ),
        (
            ZooEntry {
                name: "spiking-resnet18",
                description: "SpikingJelly spiking_resnet18 (LIF tau 2), ImageNet-size input",
                published: spec(4, &[3, 224, 224], 1000),
                small: spec(2, &[3, 32, 32], 10),
            },
            resnet::build_spiking_resnet18,
        ),
        (
            ZooEntry {
                name: "spiking-vgg11-bn",
                description: "SpikingJelly spiking_vgg11_bn (LIF tau 2, 512*7*7-4096-4096 classifier), ImageNet-size input",
                published: spec(4, &[3, 224, 224], 1000),
                small: spec(2, &[3, 32, 32], 10),
            },
            spiking_vgg::build,
        ),
        (
            ZooEntry {
                name: "spikformer-cifar10",
                description: "SpikingJelly spikformer_cifar10: patch stem, 4 blocks of spiking self-attention (384 dims, 12 heads) and MLP",
                published: spec(4, &[3, 32, 32], 10),
                small: spec(2, &[3, 16, 16], 10),
            },
            spikformer::build_cifar10,
        ),
        (
            ZooEntry {
                name: "spike-driven-transformer",
                description: "SpikingJelly SpikeDrivenTransformer, CIFAR-10 Spike-driven Transformer-2-512 (8 heads, pooling 0011)",
                published: spec(4, &[3, 32, 32], 10),
                small: spec(2, &[3, 16, 16], 10),
            },
            spike_driven_transformer::build_cifar10,
        ),
        (
            ZooEntry {
                name: "toy-if",
                description: "three blocks of Linear-IF-Linear-IF (C=512) and a Linear head",
                published: spec(16, &[512], 10),
                small: spec(4, &[64], 10),
            },
            mlp::build_toy_if,
        ),
        (
            ZooEntry {
                name: "spiking-mlp",
                description: "Linear(16,32)-LIF-Linear(32,10), the golden mlp_ce network",
                published: spec(4, &[16], 10),
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

/// Checks that `spec.sample` is an image `[C, H, W]` with H, W >= `min_hw` and returns C, with
/// the model's name and what is valid in the error.
pub(crate) fn expect_image(name: &str, spec: &InputSpec, min_hw: usize) -> Result<usize> {
    expect_sample(name, spec, "C, H, W", 3)?;
    let [c, h, w] = [spec.sample[0], spec.sample[1], spec.sample[2]];
    if h < min_hw || w < min_hw {
        return Err(CheckpointError::InvalidInput(format!(
            "model '{name}' downsamples by {min_hw}, so it needs H, W >= {min_hw}, got {h}x{w}"
        )));
    }
    Ok(c)
}

pub(crate) use crate::module::fold::one_input;

/// `torch.flatten(x, 2)` in a multi-step network's forward (a function there, not a module):
/// `[T, N, ...]` -> `[T, N, prod(...)]`.
pub(crate) fn flatten_time<'m>(cx: &mut Cx<'m>, x: Var, module: &str) -> Result<Var> {
    if x.dims().len() < 3 {
        return Err(CheckpointError::in_module(
            module,
            format!(
                "expected a multi-step input [T, N, ...] to flatten from dimension 2, got {}",
                x.shape()
            ),
        ));
    }
    flatten_from(cx, &x, 2)
}
