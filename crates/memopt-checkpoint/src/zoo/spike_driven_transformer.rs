//! The Spike-Driven Transformer as SpikingJelly 2.0 builds it
//! (`activation_based/model/spike_driven_transformer.py`, `SpikeDrivenTransformer`), in the
//! CIFAR-10 configuration of its paper (Yao et al., NeurIPS 2023, "Spike-driven
//! Transformer-2-512"): 32x32 input, 512 dims, 8 heads, 2 blocks, MLP ratio 4, pooling in the
//! last two stem stages (`pooling_stat="0011"`), T=4. SpikingJelly itself ships only
//! `sdt_8_384` (the ImageNet model); this is the same class with these arguments.
//!
//! Paths are SpikingJelly's module names, so `state_dict()` keys match:
//! `patch_embed.stages.{0..2}.{0 Conv2d, 1 BatchNorm2d, 2 LIF[, 3 MaxPool2d]}`,
//! `patch_embed.final_stage.{0 Conv2d, 1 BatchNorm2d[, 2 MaxPool2d]}`, `patch_embed.final_lif`,
//! `patch_embed.rpe_conv`, `patch_embed.rpe_bn`, `blocks.{i}.attn`
//! ([`SpikeDrivenSelfAttention`]), `blocks.{i}.mlp.{lif1, fc1, bn1, lif2, fc2, bn2}`,
//! `head_lif`, `head`.
//!
//! Each block is a chain (attention, MLP; both add their input to their output, as in
//! SpikingJelly), so planners split it. The stem is one site: its skip connection spans three
//! of its direct children. `token_mean` and `time_mean` (no parameters, so no `state_dict()`
//! key) are the means over the positions and the time steps of SpikingJelly's forward; the
//! model outputs `[N, classes]`, as SpikingJelly's does.
//!
//! The stem's, MLPs' and head's LIFs are SpikingJelly's `LIFNode()` (tau 2, no
//! `detach_reset`); the attention's have `detach_reset`. Initialisation: PyTorch's defaults, as
//! in SpikingJelly (which sets nothing else here).

use super::token_network::TokenNetwork;
use super::{expect_image, one_input};
use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::{
    BatchNorm, Conv2d, Init, Linear, Mean, Module, Neuron, PlannerHints, Pool2d, Sequential,
    SpikeDrivenSelfAttention,
};
use crate::{CheckpointError, Forward, Result, ops};
use memopt_core::Device;
use memopt_core::kernels::Conv2dParams;

/// The sizes of a Spike-Driven Transformer (SpikingJelly's `SpikeDrivenTransformer`
/// arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpikeDrivenConfig {
    /// Channels of the tokens (`embed_dims`); divisible by 8 and by `heads`.
    pub dims: usize,
    /// Attention heads (`num_heads`).
    pub heads: usize,
    /// Transformer blocks (`depths`).
    pub depth: usize,
    /// Hidden channels of each MLP as a multiple of `dims` (`mlp_ratio`), at least 2.
    pub mlp_ratio: usize,
    /// Which of the four stem stages end with a 3x3 stride-2 max pool (`pooling_stat`).
    pub pooling: [bool; 4],
}

impl SpikeDrivenConfig {
    /// Spike-driven Transformer-2-512 for CIFAR-10.
    pub const CIFAR10: SpikeDrivenConfig = SpikeDrivenConfig {
        dims: 512,
        heads: 8,
        depth: 2,
        mlp_ratio: 4,
        pooling: [false, false, true, true],
    };

    fn check(&self) -> Result<()> {
        let valid = self.dims >= 8
            && self.dims.is_multiple_of(8)
            && self.heads > 0
            && self.dims.is_multiple_of(self.heads)
            && self.depth > 0
            && self.mlp_ratio >= 2
            && self.dims.checked_mul(self.mlp_ratio).is_some();
        if valid {
            return Ok(());
        }
        Err(CheckpointError::InvalidInput(format!(
            "a Spike-Driven Transformer needs dims divisible by 8 and by heads, depth >= 1 and mlp_ratio >= 2 (dims * mlp_ratio in the address space; ratio 1 adds a second skip connection memopt does not build), got {self:?}"
        )))
    }

    /// The 2x downsamplings of the stem.
    fn pools(&self) -> usize {
        self.pooling.iter().filter(|&&p| p).count()
    }
}

fn conv(init: &mut Init, cin: usize, cout: usize, kernel: usize, bias: bool) -> Result<Conv2d> {
    let p = Conv2dParams {
        padding: [kernel / 2; 2],
        ..Conv2dParams::default()
    };
    Conv2d::new(init, cin, cout, kernel, p, bias)
}

/// `_PatchEmbed`: three Conv3x3-BN-LIF[-MaxPool] stages to `dims / 8, / 4, / 2` channels, a
/// Conv3x3-BN[-MaxPool] to `dims`, then `x + rpe_bn(rpe_conv(final_lif(x)))`.
struct PatchEmbed {
    stages: Sequential,
    final_stage: Sequential,
    final_lif: Neuron,
    rpe_conv: Conv2d,
    rpe_bn: BatchNorm,
}

impl PatchEmbed {
    fn new(init: &mut Init, in_ch: usize, cfg: &SpikeDrivenConfig) -> Result<Self> {
        let mut stages = Sequential::new();
        let mut cin = in_ch;
        for (i, div) in [8, 4, 2].into_iter().enumerate() {
            let cout = cfg.dims / div;
            let mut stage = Sequential::new()
                .push(conv(init, cin, cout, 3, true)?)
                .push(BatchNorm::new_2d(init, cout)?)
                .push(Neuron::lif(init, 2.0)?);
            if cfg.pooling[i] {
                stage = stage.push(Pool2d::max(3, 2, 1));
            }
            stages = stages.push(stage);
            cin = cout;
        }
        let mut final_stage = Sequential::new()
            .push(conv(init, cin, cfg.dims, 3, true)?)
            .push(BatchNorm::new_2d(init, cfg.dims)?);
        if cfg.pooling[3] {
            final_stage = final_stage.push(Pool2d::max(3, 2, 1));
        }
        Ok(PatchEmbed {
            stages,
            final_stage,
            final_lif: Neuron::lif(init, 2.0)?,
            rpe_conv: conv(init, cfg.dims, cfg.dims, 3, false)?,
            rpe_bn: BatchNorm::new_2d(init, cfg.dims)?,
        })
    }
}

impl Module for PatchEmbed {
    fn type_name(&self) -> &'static str {
        "_PatchEmbed"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let x = cx.call1("stages", &self.stages, x)?;
        let identity = cx.call1("final_stage", &self.final_stage, x)?;
        let y = cx.call1("final_lif", &self.final_lif, identity.clone())?;
        let y = cx.call1("rpe_conv", &self.rpe_conv, y)?;
        let y = cx.call1("rpe_bn", &self.rpe_bn, y)?;
        Ok(vec![cx.final_op(|cx| ops::add(cx, y, identity))?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("stages".into(), &self.stages),
            ("final_stage".into(), &self.final_stage),
            ("final_lif".into(), &self.final_lif),
            ("rpe_conv".into(), &self.rpe_conv),
            ("rpe_bn".into(), &self.rpe_bn),
        ]
    }
}

impl PlannerHints for PatchEmbed {}

/// `_MLP` (hidden width != dims): `x + bn2(fc2(lif2(bn1(fc1(lif1(x))))))` with 1x1
/// convolutions (with bias). Children in forward order.
fn mlp(init: &mut Init, dims: usize, hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new()
        .typed("_MLP")
        .push_named("lif1", Neuron::lif(init, 2.0)?)
        .push_named("fc1", conv(init, dims, hidden, 1, true)?)
        .push_named("bn1", BatchNorm::new_2d(init, hidden)?)
        .push_named("lif2", Neuron::lif(init, 2.0)?)
        .push_named("fc2", conv(init, hidden, dims, 1, true)?)
        .push_named("bn2", BatchNorm::new_2d(init, dims)?)
        .residual())
}

/// A Spike-Driven Transformer of `cfg` sizes for `spec` (`[T, N, C, H, W]` input, H and W
/// at least 2 to the power of the stem's poolings).
pub fn spike_driven_transformer(
    name: &str,
    cfg: SpikeDrivenConfig,
    spec: &InputSpec,
    device: Device,
    seed: u64,
) -> Result<Model> {
    cfg.check()?;
    let c = expect_image(name, spec, 1 << cfg.pools())?;
    let mut init = Init::new(device, seed);
    let stem = PatchEmbed::new(&mut init, c, &cfg)?;
    let mut blocks = Sequential::new();
    for _ in 0..cfg.depth {
        let attn = SpikeDrivenSelfAttention::new(&mut init, cfg.dims, cfg.heads)?;
        let block = Sequential::new()
            .typed("_Block")
            .push_named("attn", attn)
            .push_named("mlp", mlp(&mut init, cfg.dims, cfg.dims * cfg.mlp_ratio)?);
        blocks = blocks.push(block);
    }
    let head_lif = Neuron::lif(&mut init, 2.0)?;
    let head = Linear::new(&mut init, cfg.dims, spec.classes, true)?;
    let root = TokenNetwork {
        type_name: "SpikeDrivenTransformer",
        tokens_before: "token_mean",
        children: vec![
            ("patch_embed", Box::new(stem)),
            ("blocks", Box::new(blocks)),
            ("token_mean", Box::new(Mean::new(3))),
            ("head_lif", Box::new(head_lif)),
            ("time_mean", Box::new(Mean::new(0))),
            ("head", Box::new(head)),
        ],
    };
    Ok(Model::new(name, Box::new(root), spec.clone(), device))
}

/// The CIFAR-10 Spike-Driven Transformer on `[T, N, C, H, W]`, H and W >= 4.
pub(super) fn build_cifar10(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    spike_driven_transformer(
        "spike-driven-transformer",
        SpikeDrivenConfig::CIFAR10,
        spec,
        device,
        seed,
    )
}
