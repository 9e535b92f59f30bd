//! Spikformer as SpikingJelly 2.0 builds it (`activation_based/model/spikformer.py`,
//! `spikformer_cifar10`: 32x32 input, patch size 4, 384 dims, 12 heads, 4 blocks, MLP ratio 4,
//! LIF tau 2 with `detach_reset`).
//!
//! Paths are SpikingJelly's module names, so `state_dict()` keys match:
//! `patch_embed.stages.{0..3}.conv_bn.block.{0 Conv2d, 1 BatchNorm2d[, 2 MaxPool2d]}`,
//! `patch_embed.stages.{i}.neuron`, `patch_embed.positional_encoding` (the same layout),
//! `blocks.{i}.attn` ([`SpikingSelfAttention`]), `blocks.{i}.mlp.{fc1, fc2}.{0 Conv1d,
//! 1 BatchNorm1d}`, `blocks.{i}.mlp.{neuron1, neuron2}`, `head`.
//!
//! Two things differ from SpikingJelly's forward without changing what it computes:
//! - The skip connections are carried by the modules they skip: `positional_encoding`,
//!   `attn` and `mlp` return `x + branch(x)`. The stem and each block are then chains, which
//!   planners can split (attention and MLP are sites of their own, as in SpikingJelly's
//!   memopt split of a `SpikformerBlock`).
//! - The tokens are flattened once before `blocks` (`[T, N, C, H, W]` -> `[T, N, C, L]`, a
//!   view) rather than in and out of every block, and `token_mean` (no parameters, so no
//!   `state_dict()` key) is the mean over the tokens before `head`.
//!
//! Initialisation differs on purpose: SpikingJelly draws convolution and linear weights from a
//! truncated normal (std 0.02); memopt uses PyTorch's default uniform (±1/sqrt(fan_in)), as
//! the rest of the zoo does. Loaded weights give SpikingJelly's outputs
//! (`memopt-data`'s `spikingjelly_weights` test).

use super::expect_image;
use super::token_network::TokenNetwork;
use crate::model::{InputSpec, Model};
use crate::module::{
    BatchNorm, Conv2d, Init, Linear, Mean, Pool2d, Sequential, SpikingSelfAttention, conv1x1_bn,
    transformer_lif,
};
use crate::{CheckpointError, Result};
use memopt_core::Device;
use memopt_core::kernels::Conv2dParams;

/// The sizes of a Spikformer (SpikingJelly's `Spikformer` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpikformerConfig {
    /// Channels of the tokens (`embed_dims`); divisible by 8 and by `heads`.
    pub dims: usize,
    /// Attention heads (`num_heads`).
    pub heads: usize,
    /// Transformer blocks (`depths`).
    pub depth: usize,
    /// Hidden channels of each MLP as a multiple of `dims` (`mlp_ratio`).
    pub mlp_ratio: usize,
    /// Patch size: 4 (two 2x downsamplings in the stem) or 16 (four).
    pub patch: usize,
}

impl SpikformerConfig {
    /// `spikformer_cifar10`: 384 dims, 12 heads, 4 blocks, MLP ratio 4, patch size 4.
    pub const CIFAR10: SpikformerConfig = SpikformerConfig {
        dims: 384,
        heads: 12,
        depth: 4,
        mlp_ratio: 4,
        patch: 4,
    };

    fn check(&self) -> Result<()> {
        let valid = self.dims >= 8
            && self.dims.is_multiple_of(8)
            && self.heads > 0
            && self.dims.is_multiple_of(self.heads)
            && self.depth > 0
            && self.mlp_ratio > 0
            && self.dims.checked_mul(self.mlp_ratio).is_some()
            && matches!(self.patch, 4 | 16);
        if valid {
            return Ok(());
        }
        Err(CheckpointError::InvalidInput(format!(
            "a Spikformer needs dims divisible by 8 and by heads, depth >= 1, mlp_ratio >= 1 (dims * mlp_ratio in the address space) and patch 4 or 16, got {self:?}"
        )))
    }
}

/// `SpikformerConv2dBNLIF`: `conv_bn.block` = Conv3x3 (no bias), BatchNorm2d and, with
/// `pool`, MaxPool 3/2/1; then `neuron`.
fn conv_bn_lif(init: &mut Init, cin: usize, cout: usize, pool: bool) -> Result<Sequential> {
    let p = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let mut block = Sequential::new()
        .push(Conv2d::new(init, cin, cout, 3, p, false)?)
        .push(BatchNorm::new_2d(init, cout)?);
    if pool {
        block = block.push(Pool2d::max(3, 2, 1));
    }
    Ok(Sequential::new()
        .typed("SpikformerConv2dBNLIF")
        .push_named(
            "conv_bn",
            Sequential::new()
                .typed("SpikformerConv2dBN")
                .push_named("block", block),
        )
        .push_named("neuron", transformer_lif(init, 1.0)?))
}

/// `SpikformerPatchStem`: four Conv-BN-[MaxPool]-LIF stages to `dims / 8, / 4, / 2, 1`
/// channels (the last two pooling for patch 4, all four for patch 16), then the positional
/// encoding, a Conv-BN-LIF added to its input.
fn patch_stem(init: &mut Init, in_ch: usize, cfg: &SpikformerConfig) -> Result<Sequential> {
    let pool_from = if cfg.patch == 4 { 2 } else { 0 };
    let mut stages = Sequential::new();
    let mut cin = in_ch;
    for (i, div) in [8, 4, 2, 1].into_iter().enumerate() {
        let cout = cfg.dims / div;
        stages = stages.push(conv_bn_lif(init, cin, cout, i >= pool_from)?);
        cin = cout;
    }
    let positional = conv_bn_lif(init, cfg.dims, cfg.dims, false)?.residual();
    Ok(Sequential::new()
        .typed("SpikformerPatchStem")
        .push_named("stages", stages)
        .push_named("positional_encoding", positional))
}

/// `SpikformerBlock`: attention, then the MLP (`fc1` Conv1d-BN to `dims * mlp_ratio`,
/// `neuron1`, `fc2` back to `dims`, `neuron2`), each added to its input.
fn block(init: &mut Init, cfg: &SpikformerConfig) -> Result<Sequential> {
    let attn = SpikingSelfAttention::new(init, cfg.dims, cfg.heads)?.residual();
    let hidden = cfg.dims * cfg.mlp_ratio;
    let mlp = Sequential::new()
        .typed("SpikformerMLP")
        .push_named("fc1", conv1x1_bn(init, cfg.dims, hidden)?)
        .push_named("neuron1", transformer_lif(init, 1.0)?)
        .push_named("fc2", conv1x1_bn(init, hidden, cfg.dims)?)
        .push_named("neuron2", transformer_lif(init, 1.0)?)
        .residual();
    Ok(Sequential::new()
        .typed("SpikformerBlock")
        .push_named("attn", attn)
        .push_named("mlp", mlp))
}

/// A Spikformer of `cfg` sizes for `spec` (`[T, N, C, H, W]` input, H and W divisible by the
/// patch size).
pub fn spikformer(
    name: &str,
    cfg: SpikformerConfig,
    spec: &InputSpec,
    device: Device,
    seed: u64,
) -> Result<Model> {
    cfg.check()?;
    let c = expect_image(name, spec, cfg.patch)?;
    let (h, w) = (spec.sample[1], spec.sample[2]);
    if !h.is_multiple_of(cfg.patch) || !w.is_multiple_of(cfg.patch) {
        return Err(CheckpointError::InvalidInput(format!(
            "model '{name}' cuts {0}x{0} patches, so it needs H and W divisible by {0}, got {h}x{w}",
            cfg.patch
        )));
    }
    let mut init = Init::new(device, seed);
    let stem = patch_stem(&mut init, c, &cfg)?;
    let mut blocks = Sequential::new();
    for _ in 0..cfg.depth {
        blocks = blocks.push(block(&mut init, &cfg)?);
    }
    let head = Linear::new(&mut init, cfg.dims, spec.classes, true)?;
    let root = TokenNetwork {
        type_name: "Spikformer",
        tokens_before: "blocks",
        children: vec![
            ("patch_embed", Box::new(stem)),
            ("blocks", Box::new(blocks)),
            ("token_mean", Box::new(Mean::new(3))),
            ("head", Box::new(head)),
        ],
    };
    Ok(Model::new(name, Box::new(root), spec.clone(), device))
}

/// `spikformer_cifar10` on `[T, N, C, H, W]`, H and W divisible by 4 (SpikingJelly fixes
/// 3x32x32; any size is accepted here).
pub(super) fn build_cifar10(spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
    spikformer(
        "spikformer-cifar10",
        SpikformerConfig::CIFAR10,
        spec,
        device,
        seed,
    )
}
