//! Convolution layers: 2-D, and 1-D over tokens.

use super::cost::ModuleCost;
use super::fold::{fold_time, one_input, time_steps, unfold_time};
use super::init::Init;
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::param::Param;
use crate::{Result, ops};
use memopt_core::Shape;
use memopt_core::kernels::Conv2dParams;

/// A convolution's weight `[C_out, C_in / groups, ..kernel]` and optional bias `[C_out]`, with
/// what every convolution layer does with them.
#[derive(Debug)]
struct ConvWeights {
    weight: Param,
    bias: Option<Param>,
}

impl ConvWeights {
    /// PyTorch's default initialisation: uniform in ±1/sqrt(fan_in) for the weight of shape
    /// `weight_dims` and the bias, if any.
    fn new(init: &mut Init, weight_dims: &[usize], bias: bool, layer: &str) -> Result<Self> {
        // Sizes come from model descriptions: checked, never wrapped.
        let fan_in = weight_dims[1..]
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                crate::CheckpointError::InvalidInput(format!(
                    "{layer} weight {weight_dims:?}: the kernel has more weights per output channel than fit in the address space"
                ))
            })?;
        let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
        let weight = init.uniform(weight_dims, bound)?;
        let bias = if bias {
            Some(init.uniform(&weight_dims[..1], bound)?)
        } else {
            None
        };
        Ok(ConvWeights { weight, bias })
    }

    /// Runs `op(x, w, b, time_steps)` on the one input, `[T, N, ..]` folded into a batch of
    /// rank `rank` and unfolded after.
    fn forward<'m>(
        &'m self,
        cx: &mut Cx<'m>,
        inputs: Vec<Var>,
        (layer, rank, layout): (&str, usize, &str),
        op: impl FnOnce(&mut Cx<'m>, &Var, &Var, Option<&Var>, usize) -> Result<Var>,
    ) -> Forward<Vec<Var>> {
        let x = one_input(inputs, layer)?;
        let (x, folded) = fold_time(cx, &x, rank, layer, layout)?;
        let w = cx.param(&self.weight);
        let b = self.bias.as_ref().map(|b| cx.param(b));
        let t = time_steps(folded);
        let y = cx.final_op(|cx| op(cx, &x, &w, b.as_ref(), t))?;
        Ok(vec![unfold_time(cx, y, folded)?])
    }

    /// `weight`, then `bias` if there is one.
    fn params(&self) -> Vec<(&'static str, &Param)> {
        let mut p = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            p.push(("bias", b));
        }
        p
    }

    /// `2 · out_elems · (C_in / groups) · kernel taps` FLOPs (plus one per output for the
    /// bias); bytes of input, output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> ModuleCost {
        let per_output: u64 = self.weight.tensor().dims()[1..].iter().product::<usize>() as u64;
        ModuleCost::weighted(inputs, outputs, per_output, self.bias.is_some(), &self.params())
    }
}

/// 2-D convolution; `[T, N, C, H, W]` inputs fold `T` into the batch.
#[derive(Debug)]
pub struct Conv2d {
    weights: ConvWeights,
    params: Conv2dParams,
}

impl Conv2d {
    /// A square `kernel` convolution from `in_ch` to `out_ch` channels, initialised as PyTorch
    /// does (uniform in ±1/sqrt(fan_in)).
    pub fn new(
        init: &mut Init,
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        params: Conv2dParams,
        bias: bool,
    ) -> Result<Self> {
        let groups = params.groups.max(1);
        let weights = ConvWeights::new(init, &[out_ch, in_ch / groups, kernel, kernel], bias, "Conv2d")?;
        Ok(Conv2d { weights, params })
    }

    /// Stride, padding, dilation and groups.
    pub fn conv_params(&self) -> &Conv2dParams {
        &self.params
    }
}

impl Module for Conv2d {
    fn type_name(&self) -> &'static str {
        "Conv2d"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let layer = ("Conv2d", 4, "C, H, W");
        self.weights.forward(cx, inputs, layer, |cx, x, w, b, t| {
            ops::conv2d(cx, x, w, b, &self.params, t)
        })
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        self.weights.params()
    }
}

impl PlannerHints for Conv2d {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.params))
    }

    /// `2 · out_elems · (C_in / groups) · kh · kw` FLOPs (plus one per output for the bias);
    /// bytes of input, output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(self.weights.cost(inputs, outputs))
    }
}

/// 1-D convolution over tokens, `[N, C, L]` (or `[T, N, C, L]`, `T` folded into the batch),
/// with PyTorch's `nn.Conv1d` weight `[C_out, C_in / groups, k]`. The spiking transformers'
/// 1x1 projections are this layer with `k = 1`.
#[derive(Debug)]
pub struct Conv1d {
    weights: ConvWeights,
    params: ops::Conv1dParams,
}

impl Conv1d {
    /// A `kernel`-tap convolution from `in_ch` to `out_ch` channels, initialised as PyTorch
    /// does (uniform in ±1/sqrt(fan_in)).
    pub fn new(
        init: &mut Init,
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        params: ops::Conv1dParams,
        bias: bool,
    ) -> Result<Self> {
        let groups = params.groups.max(1);
        let weights = ConvWeights::new(init, &[out_ch, in_ch / groups, kernel], bias, "Conv1d")?;
        Ok(Conv1d { weights, params })
    }
}

impl Module for Conv1d {
    fn type_name(&self) -> &'static str {
        "Conv1d"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let layer = ("Conv1d", 3, "C, L");
        self.weights.forward(cx, inputs, layer, |cx, x, w, b, t| {
            ops::conv1d(cx, x, w, b, &self.params, t)
        })
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        self.weights.params()
    }
}

impl PlannerHints for Conv1d {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.params))
    }

    /// `2 · out_elems · (C_in / groups) · k` FLOPs (plus one per output for the bias); bytes of
    /// input, output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(self.weights.cost(inputs, outputs))
    }
}
