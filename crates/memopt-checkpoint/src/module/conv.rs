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

/// PyTorch's default initialisation of a convolution: uniform in ±1/sqrt(fan_in) for the weight
/// of shape `weight_dims` (`[C_out, C_in / groups, ..kernel]`) and the bias, if any.
fn init_conv(
    init: &mut Init,
    weight_dims: &[usize],
    bias: bool,
    layer: &str,
) -> Result<(Param, Option<Param>)> {
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
    Ok((weight, bias))
}

/// The parameters of a convolution by name: `weight`, then `bias` if it has one.
fn conv_params<'a>(weight: &'a Param, bias: &'a Option<Param>) -> Vec<(&'static str, &'a Param)> {
    let mut p = vec![("weight", weight)];
    if let Some(b) = bias {
        p.push(("bias", b));
    }
    p
}

/// 2-D convolution; `[T, N, C, H, W]` inputs fold `T` into the batch.
#[derive(Debug)]
pub struct Conv2d {
    weight: Param,
    bias: Option<Param>,
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
        let (weight, bias) = init_conv(init, &[out_ch, in_ch / groups, kernel, kernel], bias, "Conv2d")?;
        Ok(Conv2d { weight, bias, params })
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
        let x = one_input(inputs, "Conv2d")?;
        let (x, folded) = fold_time(cx, &x, 4, "Conv2d", "C, H, W")?;
        let w = cx.param(&self.weight);
        let b = self.bias.as_ref().map(|b| cx.param(b));
        let t = time_steps(folded);
        let y = cx.final_op(|cx| ops::conv2d(cx, &x, &w, b.as_ref(), &self.params, t))?;
        Ok(vec![unfold_time(cx, y, folded)?])
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        conv_params(&self.weight, &self.bias)
    }
}

impl PlannerHints for Conv2d {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.params))
    }

    /// `2 · out_elems · (C_in / groups) · kh · kw` FLOPs (plus one per output for the bias);
    /// bytes of input, output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        // weight dims are [C_out, C_in / groups, kh, kw] by construction.
        let per_output: u64 = self.weight.tensor().dims()[1..].iter().product::<usize>() as u64;
        Some(ModuleCost::weighted(
            inputs,
            outputs,
            per_output,
            self.bias.is_some(),
            &self.params(),
        ))
    }
}

/// 1-D convolution over tokens, `[N, C, L]` (or `[T, N, C, L]`, `T` folded into the batch),
/// with PyTorch's `nn.Conv1d` weight `[C_out, C_in / groups, k]`. The spiking transformers'
/// 1x1 projections are this layer with `k = 1`.
#[derive(Debug)]
pub struct Conv1d {
    weight: Param,
    bias: Option<Param>,
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
        let (weight, bias) = init_conv(init, &[out_ch, in_ch / groups, kernel], bias, "Conv1d")?;
        Ok(Conv1d { weight, bias, params })
    }
}

impl Module for Conv1d {
    fn type_name(&self) -> &'static str {
        "Conv1d"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Conv1d")?;
        let (x, folded) = fold_time(cx, &x, 3, "Conv1d", "C, L")?;
        let w = cx.param(&self.weight);
        let b = self.bias.as_ref().map(|b| cx.param(b));
        let t = time_steps(folded);
        let y = cx.final_op(|cx| ops::conv1d(cx, &x, &w, b.as_ref(), &self.params, t))?;
        Ok(vec![unfold_time(cx, y, folded)?])
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        conv_params(&self.weight, &self.bias)
    }
}

impl PlannerHints for Conv1d {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.params))
    }

    /// `2 · out_elems · (C_in / groups) · k` FLOPs (plus one per output for the bias); bytes of
    /// input, output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        let per_output: u64 = self.weight.tensor().dims()[1..].iter().product::<usize>() as u64;
        Some(ModuleCost::weighted(
            inputs,
            outputs,
            per_output,
            self.bias.is_some(),
            &self.params(),
        ))
    }
}
