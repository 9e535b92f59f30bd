//! Batch normalisation layers.

use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::{fold_time, one_input, unfold_time};
use super::init::Init;
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::param::{Buffer, Param};
use crate::{Result, ops};
use memopt_core::Shape;

/// BatchNorm over channels: `BatchNorm1d` for `[N, C]` ([`BatchNorm::new_1d`]) or for tokens
/// `[N, C, L]` ([`BatchNorm::new_1d_tokens`]), `BatchNorm2d` for `[N, C, H, W]`; a leading `T`
/// is folded into the batch, so statistics span all time steps
/// (also when a checkpointed segment runs the time steps in chunks: see
/// [`crate::ops::batch_norm`]).
#[derive(Debug)]
pub struct BatchNorm {
    weight: Param,
    bias: Param,
    running_mean: Buffer,
    running_var: Buffer,
    momentum: f32,
    eps: f32,
    rank: usize,
}

impl BatchNorm {
    /// `BatchNorm2d(channels)` with PyTorch's defaults (momentum 0.1, eps 1e-5, affine).
    pub fn new_2d(init: &mut Init, channels: usize) -> Result<Self> {
        Self::new(init, channels, 4)
    }

    /// `BatchNorm1d(channels)` for `[N, C]` inputs (or `[T, N, C]`).
    pub fn new_1d(init: &mut Init, channels: usize) -> Result<Self> {
        Self::new(init, channels, 2)
    }

    /// `BatchNorm1d(channels)` for tokens, `[N, C, L]` inputs (or `[T, N, C, L]`), as the
    /// spiking transformers normalise their `L` tokens: statistics per channel over the batch
    /// and the tokens.
    pub fn new_1d_tokens(init: &mut Init, channels: usize) -> Result<Self> {
        Self::new(init, channels, 3)
    }

    fn new(init: &mut Init, channels: usize, rank: usize) -> Result<Self> {
        Ok(BatchNorm {
            weight: init.constant(&[channels], 1.0)?,
            bias: init.constant(&[channels], 0.0)?,
            running_mean: init.buffer(&[channels], 0.0)?,
            running_var: init.buffer(&[channels], 1.0)?,
            momentum: 0.1,
            eps: 1e-5,
            rank,
        })
    }

    /// Running mean and variance `[C]`.
    pub fn running_stats(&self) -> (&Buffer, &Buffer) {
        (&self.running_mean, &self.running_var)
    }
}

impl Module for BatchNorm {
    fn type_name(&self) -> &'static str {
        if self.rank == 4 {
            "BatchNorm2d"
        } else {
            "BatchNorm1d"
        }
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let name = self.type_name();
        let x = one_input(inputs, name)?;
        let layout = match self.rank {
            4 => "C, H, W",
            3 => "C, L",
            _ => "C",
        };
        let (x, folded) = fold_time(cx, &x, self.rank, name, layout)?;
        let w = cx.param(&self.weight);
        let b = cx.param(&self.bias);
        let running = (self.running_mean.tensor(), self.running_var.tensor());
        let y =
            cx.final_op(|cx| ops::batch_norm(cx, &x, Some(&w), Some(&b), running, self.momentum, self.eps))?;
        Ok(vec![unfold_time(cx, y, folded)?])
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        vec![("weight", &self.weight), ("bias", &self.bias)]
    }

    fn buffers(&self) -> Vec<(&'static str, &Buffer)> {
        vec![
            ("running_mean", &self.running_mean),
            ("running_var", &self.running_var),
        ]
    }
}

impl PlannerHints for BatchNorm {
    fn config_key(&self) -> Option<String> {
        Some(format!(
            "momentum={:?} eps={:?} rank={}",
            self.momentum, self.eps, self.rank
        ))
    }

    /// About 8 FLOPs per element (mean, variance, normalisation, affine); the input is read
    /// twice (statistics, then normalisation) and the output written once.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(ModuleCost {
            flops: elems(outputs).saturating_mul(8),
            bytes: f32_bytes(inputs)
                .saturating_mul(2)
                .saturating_add(f32_bytes(outputs)),
        })
    }

    /// Its training statistics span all time steps; chunked segments compute them in passes.
    fn batch_statistics(&self, training: bool) -> bool {
        training
    }
}
