//! 2-D convolution layer.

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
        // Sizes come from model descriptions: checked, never wrapped.
        let fan_in = (in_ch / groups)
            .checked_mul(kernel)
            .and_then(|v| v.checked_mul(kernel))
            .ok_or_else(|| {
                crate::CheckpointError::InvalidInput(format!(
                    "Conv2d with {} input channels per group and a {kernel}x{kernel} kernel has more weights per output channel than fit in the address space",
                    in_ch / groups
                ))
            })?;
        let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
        Ok(Conv2d {
            weight: init.uniform(&[out_ch, in_ch / groups, kernel, kernel], bound)?,
            bias: if bias {
                Some(init.uniform(&[out_ch], bound)?)
            } else {
                None
            },
            params,
        })
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
        let mut p = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            p.push(("bias", b));
        }
        p
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
