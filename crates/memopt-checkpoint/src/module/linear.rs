//! Fully connected layer.

use super::cost::ModuleCost;
use super::fold::one_input;
use super::init::Init;
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::param::Param;
use crate::{Result, ops};
use memopt_core::Shape;

/// `y = x wᵀ + b` over the last dimension; `[T, N, F]` inputs run as `T*N` rows.
#[derive(Debug)]
pub struct Linear {
    weight: Param,
    bias: Option<Param>,
}

impl Linear {
    /// A layer from `in_features` to `out_features`, initialised as PyTorch does
    /// (uniform in ±1/sqrt(in_features)).
    pub fn new(init: &mut Init, in_features: usize, out_features: usize, bias: bool) -> Result<Self> {
        let bound = 1.0 / (in_features.max(1) as f32).sqrt();
        Ok(Linear {
            weight: init.uniform(&[out_features, in_features], bound)?,
            bias: if bias {
                Some(init.uniform(&[out_features], bound)?)
            } else {
                None
            },
        })
    }

    /// The weight `[out, in]`.
    pub fn weight(&self) -> &Param {
        &self.weight
    }
}

impl Module for Linear {
    fn type_name(&self) -> &'static str {
        "Linear"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Linear")?;
        // [T, N, F]: weight gradients accumulate per time step (see ops::linear).
        let t = if x.dims().len() >= 3 { x.dims()[0] } else { 1 };
        let w = cx.param(&self.weight);
        let b = self.bias.as_ref().map(|b| cx.param(b));
        Ok(vec![ops::linear(cx, &x, &w, b.as_ref(), t)?])
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        let mut p = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            p.push(("bias", b));
        }
        p
    }
}

impl PlannerHints for Linear {
    fn config_key(&self) -> Option<String> {
        Some(String::new())
    }

    /// `2 · out_elems · in_features` FLOPs (plus one per output for the bias); bytes of input,
    /// output, weight and bias.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        // weight dims are [out_features, in_features] by construction.
        let in_features = self.weight.tensor().dims()[1] as u64;
        Some(ModuleCost::weighted(
            inputs,
            outputs,
            in_features,
            self.bias.is_some(),
            &self.params(),
        ))
    }
}
