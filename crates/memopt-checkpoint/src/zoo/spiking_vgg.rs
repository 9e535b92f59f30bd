//! Spiking VGG-11 with BatchNorm as in SpikingJelly 2.0's model zoo
//! (`activation_based/model/spiking_vgg.py`, `spiking_vgg11_bn`, modified from torchvision's
//! `vgg.py`), multi-step, with LIF neurons (`spiking_neuron=neuron.LIFNode`, tau 2, defaults).
//!
//! Paths are SpikingJelly's: `features.0` .. `features.28` (cfg "A": for each width
//! Conv3x3(padding 1, bias)-BN-LIF, and MaxPool2d(2, 2) at each "M"), `avgpool`
//! (AdaptiveAvgPool2d((7, 7))), `classifier.0` .. `classifier.6` (Linear(512*7*7, 4096), LIF,
//! Dropout(0.5), Linear(4096, 4096), LIF, Dropout(0.5), Linear(4096, classes)). The dropouts are
//! SpikingJelly's `layer.Dropout`: in multi-step mode one mask for all time steps.
//!
//! Initialisation differs on purpose: SpikingJelly draws conv weights with
//! `kaiming_normal_(mode="fan_out")` (bias 0) and linear weights from N(0, 0.01) (bias 0); we use
//! PyTorch's default uniform init (±1/sqrt(fan_in)) for both, as the rest of the crate does
//! (there is no normal sampler). BatchNorm weight 1, bias 0 as SpikingJelly sets them.

use super::{expect_image, flatten_time, one_input};
use crate::Forward;
use crate::Result;
use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::{
    BatchNorm, Conv2d, Dropout, Init, Linear, Module, Neuron, PlannerHints, Pool2d, Sequential,
};
use memopt_core::Device;
use memopt_core::kernels::Conv2dParams;

/// A layer of a VGG configuration: a 3x3 conv to that many channels, or a max pool.
#[derive(Debug, Clone, Copy)]
enum Cfg {
    Conv(usize),
    MaxPool,
}

/// VGG configuration "A" (VGG-11).
const CFG_A: [Cfg; 13] = [
    Cfg::Conv(64),
    Cfg::MaxPool,
    Cfg::Conv(128),
    Cfg::MaxPool,
    Cfg::Conv(256),
    Cfg::Conv(256),
    Cfg::MaxPool,
    Cfg::Conv(512),
    Cfg::Conv(512),
    Cfg::MaxPool,
    Cfg::Conv(512),
    Cfg::Conv(512),
    Cfg::MaxPool,
];

/// `SpikingVGG`: `features`, `avgpool`, then `torch.flatten(x, 2)` (a function there, not a
/// module) and `classifier`.
struct SpikingVgg {
    features: Sequential,
    avgpool: Pool2d,
    classifier: Sequential,
}

impl Module for SpikingVgg {
    fn type_name(&self) -> &'static str {
        "SpikingVGG"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let x = cx.call1("features", &self.features, x)?;
        let x = cx.call1("avgpool", &self.avgpool, x)?;
        let x = flatten_time(cx, x, self.type_name())?;
        Ok(vec![cx.call1("classifier", &self.classifier, x)?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("features".into(), &self.features),
            ("avgpool".into(), &self.avgpool),
            ("classifier".into(), &self.classifier),
        ]
    }
}

impl PlannerHints for SpikingVgg {
    /// The children run in order; the flatten before the classifier is a view (no memory).
    fn children_form_chain(&self) -> bool {
        true
    }
}

/// `make_layers(cfg, batch_norm=True)` from `in_channels` input channels.
fn make_layers(init: &mut Init, cfg: &[Cfg], in_channels: usize) -> Result<Sequential> {
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let mut layers = Sequential::new();
    let mut cin = in_channels;
    for &v in cfg {
        layers = match v {
            Cfg::MaxPool => layers.push(Pool2d::max(2, 2, 0)),
            Cfg::Conv(cout) => {
                let conv = Conv2d::new(init, cin, cout, 3, pad1, true)?;
                cin = cout;
                layers
                    .push(conv)
                    .push(BatchNorm::new_2d(init, cout)?)
                    .push(Neuron::lif(init, 2.0)?)
            }
        };
    }
    Ok(layers)
}

/// `spiking_vgg11_bn(spiking_neuron=neuron.LIFNode)` on `[T, N, C, H, W]` with H, W >= 32 (five
/// 2x2 max pools; the adaptive pool then takes any size to 7x7). SpikingJelly fixes C = 3; any C
/// is accepted here.
pub(super) fn build(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    let name = "spiking-vgg11-bn";
    let c = expect_image(name, spec, 32)?;
    let mut init = Init::new(device, seed);
    let features = make_layers(&mut init, &CFG_A, c)?;
    let classifier = Sequential::new()
        .push(Linear::new(&mut init, 512 * 7 * 7, 4096, true)?)
        .push(Neuron::lif(&mut init, 2.0)?)
        .push(Dropout::new(0.5))
        .push(Linear::new(&mut init, 4096, 4096, true)?)
        .push(Neuron::lif(&mut init, 2.0)?)
        .push(Dropout::new(0.5))
        .push(Linear::new(&mut init, 4096, spec.classes, true)?);
    let root = SpikingVgg {
        features,
        avgpool: Pool2d::adaptive_avg([7, 7]),
        classifier,
    };
    Ok(Model::new(name, Box::new(root), spec.clone(), device))
}
