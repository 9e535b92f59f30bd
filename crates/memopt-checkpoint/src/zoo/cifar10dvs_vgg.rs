//! The CIFAR10-DVS VGG of SpikingJelly's memopt example.

use super::expect_sample;
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::{
    BatchNorm, Conv2d, Dropout, Flatten, Init, Linear, Module, Neuron, PlannerHints, Pool2d, Sequential,
};
use crate::{CheckpointError, Result};
use memopt_core::Device;
use memopt_core::kernels::{Conv2dParams, NeuronConfig, NeuronKind, Surrogate};

/// `VGGBlock`: `proj_bn` = [AvgPool2d(2)] Conv3x3 BN, then `neuron` = LIF. Splits spatially into
/// `proj_bn` and `neuron`, as its `__spatial_split__` does. Its chain inlines `proj_bn`, so a
/// run of its links can hold the BatchNorm and the neuron without the convolution: such a
/// segment keeps only the convolution's output for backward (the BatchNorm's saved input) and
/// recomputes the BatchNorm and the neuron, elementwise work.
struct VggBlock {
    proj_bn: Sequential,
    neuron: Neuron,
}

impl Module for VggBlock {
    fn type_name(&self) -> &'static str {
        "VGGBlock"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        cx.call_children(self, inputs)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("proj_bn".into(), &self.proj_bn), ("neuron".into(), &self.neuron)]
    }
}

impl PlannerHints for VggBlock {
    fn children_form_chain(&self) -> bool {
        true
    }

    fn supports_child_ranges(&self) -> bool {
        true
    }

    fn inlined_children(&self) -> &'static [usize] {
        &[0]
    }
}

/// The example's LIF: tau 1.333, decay_input false, detach_reset true, ATan surrogate.
pub fn lif() -> NeuronConfig {
    NeuronConfig {
        kind: NeuronKind::Lif {
            tau: 1.333,
            decay_input: false,
        },
        detach_reset: true,
        surrogate: Surrogate::ATan { alpha: 2.0 },
        ..NeuronConfig::lif(1.333)
    }
}

fn block(init: &mut Init, cin: usize, cout: usize, avg_pool: bool) -> Result<VggBlock> {
    let mut proj_bn = Sequential::new();
    if avg_pool {
        proj_bn = proj_bn.push(Pool2d::avg(2, 2, 0));
    }
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    proj_bn = proj_bn
        .push(Conv2d::new(init, cin, cout, 3, pad1, true)?)
        .push(BatchNorm::new_2d(init, cout)?);
    Ok(VggBlock {
        proj_bn,
        neuron: Neuron::new(init, lif(), 2.0)?,
    })
}

/// `features` (8 blocks and a final AvgPool2d(2)), flatten from dim 2, `classifier`
/// (Dropout(0.25) and Linear(512·d·d, classes) with d = H/16).
pub(super) fn build(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    expect_sample("cifar10dvs-vgg", spec, "C, H, W", 3)?;
    let [c, h, w] = [spec.sample[0], spec.sample[1], spec.sample[2]];
    if h % 16 != 0 || w % 16 != 0 {
        return Err(CheckpointError::InvalidInput(format!(
            "model 'cifar10dvs-vgg' pools four times by 2, so H and W must be multiples of 16, got {h}x{w}"
        )));
    }
    let mut init = Init::new(device, seed);
    let plan = [
        (c, 64, false),
        (64, 128, false),
        (128, 256, true),
        (256, 256, false),
        (256, 512, true),
        (512, 512, false),
        (512, 512, true),
        (512, 512, false),
    ];
    let mut features = Sequential::new();
    for (cin, cout, pool) in plan {
        features = features.push(block(&mut init, cin, cout, pool)?);
    }
    features = features.push(Pool2d::avg(2, 2, 0));
    let classifier = Sequential::new()
        .push(Dropout::per_element(0.25))
        .push(Linear::new(
            &mut init,
            512 * (h / 16) * (w / 16),
            spec.classes,
            true,
        )?);
    let root = Sequential::new()
        .push_named("features", features)
        .push_named("flatten", Flatten::new(2))
        .push_named("classifier", classifier);
    Ok(Model::new("cifar10dvs-vgg", Box::new(root), spec.clone(), device))
}
