//! Spiking ResNet-18 and SEW-ResNet-18 as in SpikingJelly 2.0's model zoo
//! (`activation_based/model/spiking_resnet.py`, `sew_resnet.py`, both modified from
//! torchvision's `resnet.py`), multi-step, with LIF neurons (`spiking_neuron=neuron.LIFNode`,
//! tau 2, SpikingJelly's defaults).
//!
//! Paths are SpikingJelly's module names: `conv1`, `bn1`, `sn1`, `maxpool`, `layer1` ..
//! `layer4` (each a Sequential of two `BasicBlock`s `0`, `1` with children `conv1`, `bn1`, `sn1`,
//! `conv2`, `bn2`, `sn2`, and for the first block of `layer2` .. `layer4` `downsample` =
//! Sequential(`0` Conv1x1, `1` BN) and, in SEW, `downsample_sn`), `avgpool`, `fc`.
//!
//! Initialisation differs on purpose: SpikingJelly draws conv weights with
//! `kaiming_normal_(mode="fan_out")`; we use PyTorch's default uniform init (±1/sqrt(fan_in)) for
//! every conv and linear layer, as the rest of the crate does (there is no normal sampler).
//! BatchNorm weight 1, bias 0 as SpikingJelly sets them; `zero_init_residual` is false, its default.

use super::{expect_image, flatten_time, one_input};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::{BatchNorm, Conv2d, Init, Linear, Module, Neuron, PlannerHints, Pool2d, Sequential};
use crate::{Result, ops};
use memopt_core::Device;
use memopt_core::kernels::Conv2dParams;

/// Blocks per stage of ResNet-18 (`[2, 2, 2, 2]`).
const RESNET18_LAYERS: [usize; 4] = [2, 2, 2, 2];

/// How a residual block joins its branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Residual {
    /// Spiking ResNet: `sn2(bn2(conv2(..)) + identity)`.
    Spiking,
    /// SEW ResNet with connect function ADD: `identity + sn2(bn2(conv2(..)))`, the identity of a
    /// downsampling block being `downsample_sn(downsample(x))`.
    SewAdd,
}

/// The LIF neuron of these models: `neuron.LIFNode(tau=2.)` with SpikingJelly's defaults.
fn lif(init: &mut Init) -> Result<Neuron> {
    Neuron::lif(init, 2.0)
}

/// `conv3x3`: 3x3, padding 1, no bias.
fn conv3x3(init: &mut Init, cin: usize, cout: usize, stride: usize) -> Result<Conv2d> {
    let p = Conv2dParams {
        stride: [stride; 2],
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    Conv2d::new(init, cin, cout, 3, p, false)
}

/// `conv1x1`: 1x1, no padding, no bias.
fn conv1x1(init: &mut Init, cin: usize, cout: usize, stride: usize) -> Result<Conv2d> {
    let p = Conv2dParams {
        stride: [stride; 2],
        ..Conv2dParams::default()
    };
    Conv2d::new(init, cin, cout, 1, p, false)
}

/// `BasicBlock` (expansion 1) of either model. Its children, in SpikingJelly's registration
/// order: `conv1`, `bn1`, `sn1`, `conv2`, `bn2`, `sn2`, then `downsample` and (SEW only)
/// `downsample_sn` when the block changes stride or width.
struct BasicBlock {
    residual: Residual,
    conv1: Conv2d,
    bn1: BatchNorm,
    sn1: Neuron,
    conv2: Conv2d,
    bn2: BatchNorm,
    sn2: Neuron,
    downsample: Option<Sequential>,
    downsample_sn: Option<Neuron>,
}

impl BasicBlock {
    /// A block from `inplanes` to `planes` channels; `downsample` is built by the caller before
    /// the block, as `_make_layer` does.
    fn new(
        init: &mut Init,
        residual: Residual,
        inplanes: usize,
        planes: usize,
        stride: usize,
        downsample: Option<Sequential>,
    ) -> Result<Self> {
        let conv1 = conv3x3(init, inplanes, planes, stride)?;
        let bn1 = BatchNorm::new_2d(init, planes)?;
        let sn1 = lif(init)?;
        let conv2 = conv3x3(init, planes, planes, 1)?;
        let bn2 = BatchNorm::new_2d(init, planes)?;
        let sn2 = lif(init)?;
        let downsample_sn = match (residual, &downsample) {
            (Residual::SewAdd, Some(_)) => Some(lif(init)?),
            _ => None,
        };
        Ok(BasicBlock {
            residual,
            conv1,
            bn1,
            sn1,
            conv2,
            bn2,
            sn2,
            downsample,
            downsample_sn,
        })
    }
}

impl Module for BasicBlock {
    fn type_name(&self) -> &'static str {
        "BasicBlock"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let out = cx.call1("conv1", &self.conv1, x.clone())?;
        let out = cx.call1("bn1", &self.bn1, out)?;
        let out = cx.call1("sn1", &self.sn1, out)?;
        let out = cx.call1("conv2", &self.conv2, out)?;
        let out = cx.call1("bn2", &self.bn2, out)?;
        match self.residual {
            Residual::Spiking => {
                let identity = match &self.downsample {
                    Some(ds) => cx.call1("downsample", ds, x)?,
                    None => x,
                };
                // Neither branch is read again (add keeps nothing): the sum may overwrite one.
                let sum = ops::add(cx, out, identity)?;
                Ok(vec![cx.final_op(|cx| cx.call1("sn2", &self.sn2, sum))?])
            }
            Residual::SewAdd => {
                let out = cx.call1("sn2", &self.sn2, out)?;
                let identity = match (&self.downsample, &self.downsample_sn) {
                    (Some(ds), Some(sn)) => {
                        let d = cx.call1("downsample", ds, x)?;
                        cx.call1("downsample_sn", sn, d)?
                    }
                    _ => x,
                };
                // sew_function(identity, out, "ADD") = identity + out.
                Ok(vec![cx.final_op(|cx| ops::add(cx, identity, out))?])
            }
        }
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("conv1".into(), &self.conv1),
            ("bn1".into(), &self.bn1),
            ("sn1".into(), &self.sn1),
            ("conv2".into(), &self.conv2),
            ("bn2".into(), &self.bn2),
            ("sn2".into(), &self.sn2),
        ];
        if let Some(ds) = &self.downsample {
            c.push(("downsample".into(), ds));
        }
        if let Some(sn) = &self.downsample_sn {
            c.push(("downsample_sn".into(), sn));
        }
        c
    }
}

impl PlannerHints for BasicBlock {}

/// The network (`SpikingResNet` / `SEWResNet`): its children are SpikingJelly's top-level
/// modules; `torch.flatten(x, 2)` between `avgpool` and `fc` is a function there, not a module,
/// and is one here too.
struct ResNet {
    residual: Residual,
    /// `(name, module)` in forward order: conv1, bn1, sn1, maxpool, layer1..4, avgpool, fc.
    children: Vec<(&'static str, Box<dyn Module>)>,
}

impl Module for ResNet {
    fn type_name(&self) -> &'static str {
        match self.residual {
            Residual::Spiking => "SpikingResNet",
            Residual::SewAdd => "SEWResNet",
        }
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        cx.call_children(self, inputs)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        crate::context::named_children(&self.children)
    }
    fn child_count(&self) -> usize {
        self.children.len()
    }
}

impl PlannerHints for ResNet {
    /// Multi-step: flatten from dimension 2 before `fc` (`[T, N, 512, 1, 1]` -> `[T, N, 512]`).
    fn before_child<'m>(&'m self, cx: &mut Cx<'m>, index: usize, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        if self.children.get(index).is_none_or(|(name, _)| *name != "fc") {
            return Ok(inputs);
        }
        let x = one_input(inputs, self.type_name())?;
        Ok(vec![flatten_time(cx, x, self.type_name())?])
    }

    /// Plans may give a run of children (the stem `conv1`..`maxpool`, say) one policy.
    fn supports_child_ranges(&self) -> bool {
        true
    }

    /// The children run in order; the flatten before the classifier is a view (no memory).
    fn children_form_chain(&self) -> bool {
        true
    }
}

/// `_make_layer`: `blocks` BasicBlocks to `planes` channels, the first with `stride` and a
/// downsample branch when the stride or the width changes. Updates `inplanes`.
fn make_layer(
    init: &mut Init,
    residual: Residual,
    inplanes: &mut usize,
    planes: usize,
    blocks: usize,
    stride: usize,
) -> Result<Sequential> {
    let downsample = if stride != 1 || *inplanes != planes {
        Some(
            Sequential::new()
                .push(conv1x1(init, *inplanes, planes, stride)?)
                .push(BatchNorm::new_2d(init, planes)?),
        )
    } else {
        None
    };
    let mut layer = Sequential::new().push(BasicBlock::new(
        init, residual, *inplanes, planes, stride, downsample,
    )?);
    *inplanes = planes;
    for _ in 1..blocks {
        layer = layer.push(BasicBlock::new(init, residual, planes, planes, 1, None)?);
    }
    Ok(layer)
}

fn build_resnet18(
    name: &str,
    residual: Residual,
    spec: &InputSpec,
    device: Device,
    seed: u64,
) -> Result<Model> {
    let c = expect_image(name, spec, 32)?;
    let mut init = Init::new(device, seed);
    let conv1 = Conv2d::new(
        &mut init,
        c,
        64,
        7,
        Conv2dParams {
            stride: [2, 2],
            padding: [3, 3],
            ..Conv2dParams::default()
        },
        false,
    )?;
    let bn1 = BatchNorm::new_2d(&mut init, 64)?;
    let sn1 = lif(&mut init)?;
    let mut inplanes = 64;
    let mut children: Vec<(&'static str, Box<dyn Module>)> = vec![
        ("conv1", Box::new(conv1)),
        ("bn1", Box::new(bn1)),
        ("sn1", Box::new(sn1)),
        ("maxpool", Box::new(Pool2d::max(3, 2, 1))),
    ];
    let stages = [
        ("layer1", 64, 1),
        ("layer2", 128, 2),
        ("layer3", 256, 2),
        ("layer4", 512, 2),
    ];
    for ((stage, planes, stride), blocks) in stages.into_iter().zip(RESNET18_LAYERS) {
        let layer = make_layer(&mut init, residual, &mut inplanes, planes, blocks, stride)?;
        children.push((stage, Box::new(layer)));
    }
    children.push(("avgpool", Box::new(Pool2d::adaptive_avg([1, 1]))));
    children.push(("fc", Box::new(Linear::new(&mut init, 512, spec.classes, true)?)));
    let root = ResNet { residual, children };
    Ok(Model::new(name, Box::new(root), spec.clone(), device))
}

/// `sew_resnet18(cnf="ADD", spiking_neuron=neuron.LIFNode)` on `[T, N, C, H, W]`, H, W >= 32
/// (SpikingJelly fixes C = 3; any C is accepted here).
pub(super) fn build_sew_resnet18(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    build_resnet18("sew-resnet18", Residual::SewAdd, spec, device, seed)
}

/// `spiking_resnet18(spiking_neuron=neuron.LIFNode)` on `[T, N, C, H, W]`, H, W >= 32
/// (SpikingJelly fixes C = 3; any C is accepted here).
pub(super) fn build_spiking_resnet18(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    build_resnet18("spiking-resnet18", Residual::Spiking, spec, device, seed)
}
