//! Parameter-free layers: Flatten, ReLU, Dropout, Mean.

use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::{flatten_from, one_input};
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::{CheckpointError, ops};
use memopt_core::Shape;

/// Flattens every dimension from `start_dim` on (SpikingJelly's multi-step `Flatten` uses
/// `start_dim = 2` on `[T, N, ...]`).
#[derive(Debug)]
pub struct Flatten {
    start_dim: usize,
}

impl Flatten {
    /// Flatten from `start_dim`.
    pub fn new(start_dim: usize) -> Self {
        Flatten { start_dim }
    }
}

impl Module for Flatten {
    fn type_name(&self) -> &'static str {
        "Flatten"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Flatten")?;
        if x.dims().len() < self.start_dim {
            let message = format!(
                "cannot flatten from dimension {} of a {}-D input",
                self.start_dim,
                x.dims().len()
            );
            return Err(CheckpointError::in_module("Flatten", message).into());
        }
        Ok(vec![flatten_from(cx, &x, self.start_dim)?])
    }
}

impl PlannerHints for Flatten {
    fn config_key(&self) -> Option<String> {
        Some(format!("start_dim={}", self.start_dim))
    }

    /// Nothing: the output is a view of the input.
    fn cost(&self, _inputs: &[Shape], _outputs: &[Shape]) -> Option<ModuleCost> {
        Some(ModuleCost::ZERO)
    }
}

/// `max(x, 0)`.
#[derive(Debug, Default)]
pub struct Relu;

impl Module for Relu {
    fn type_name(&self) -> &'static str {
        "ReLU"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "ReLU")?;
        Ok(vec![ops::relu(cx, &x)?])
    }
}

impl PlannerHints for Relu {
    fn config_key(&self) -> Option<String> {
        Some(String::new())
    }
}

/// Dropout with probability `p`. On a multi-step input `[T, N, ...]` one mask is shared by all
/// time steps (SpikingJelly's `layer.Dropout` in multi-step mode); on a plain batch the mask is
/// per element. The mask is regenerated from the RNG in backward, never stored.
#[derive(Debug)]
pub struct Dropout {
    p: f32,
    multi_step: bool,
}

impl Dropout {
    /// Multi-step dropout (mask shared over time), p in `[0, 1)`.
    pub fn new(p: f32) -> Self {
        Dropout { p, multi_step: true }
    }

    /// Dropout with an independent mask per element, for non-temporal inputs.
    pub fn per_element(p: f32) -> Self {
        Dropout { p, multi_step: false }
    }
}

impl Module for Dropout {
    fn type_name(&self) -> &'static str {
        "Dropout"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Dropout")?;
        let n = x.shape().elem_count();
        let period = match (self.multi_step, x.dims().first()) {
            (true, Some(&t)) if t > 0 => n / t,
            _ => n,
        };
        Ok(vec![ops::dropout(cx, &x, self.p, period.max(1))?])
    }
}

impl PlannerHints for Dropout {
    fn config_key(&self) -> Option<String> {
        Some(format!("p={:?} multi_step={}", self.p, self.multi_step))
    }

    fn time_coupling(&self, training: bool) -> Option<String> {
        (training && !self.multi_step && self.p > 0.0).then(|| {
            "it draws an independent mask per time step, which chunks would draw differently".to_string()
        })
    }
}

/// The mean over dimension `dim`, which is removed (a spiking transformer's mean over its
/// tokens, `[T, N, C, L]` -> `[T, N, C]`, with `dim = 3`).
#[derive(Debug)]
pub struct Mean {
    dim: usize,
}

impl Mean {
    /// The mean over dimension `dim`.
    pub fn new(dim: usize) -> Self {
        Mean { dim }
    }
}

impl Module for Mean {
    fn type_name(&self) -> &'static str {
        "Mean"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Mean")?;
        Ok(vec![ops::mean_dim(cx, &x, self.dim)?])
    }
}

impl PlannerHints for Mean {
    fn config_key(&self) -> Option<String> {
        Some(format!("dim={}", self.dim))
    }

    /// The mean over dimension 0 of a multi-step value is over its time steps.
    fn time_coupling(&self, _training: bool) -> Option<String> {
        (self.dim == 0).then(|| "Mean over dimension 0 averages the time steps".to_string())
    }

    /// One FLOP per input element; the input read and the output written once.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(ModuleCost {
            flops: elems(inputs),
            bytes: f32_bytes(inputs).saturating_add(f32_bytes(outputs)),
        })
    }
}
