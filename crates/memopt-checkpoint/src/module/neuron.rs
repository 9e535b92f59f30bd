//! Multi-step spiking neurons (LIF, IF, parametric LIF) as in SpikingJelly.

use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::one_input;
use super::init::Init;
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::param::Param;
use crate::{Result, ops};
use memopt_core::Shape;
use memopt_core::kernels::{NeuronConfig, NeuronKind};

/// A multi-step spiking neuron over `[T, N, ...]`. Its membrane state lives in the forward
/// context ([`Cx::state`]) under the module's path: absent at the start of a step (reset
/// value), written after the step, and carried explicitly across checkpointed segments and time
/// chunks.
#[derive(Debug)]
pub struct Neuron {
    cfg: NeuronConfig,
    w: Option<Param>,
}

impl Neuron {
    /// A neuron with `cfg`. A parametric LIF gets its parameter `w = -ln(init_tau - 1)`
    /// (so `1/tau = sigmoid(w)`), with `init_tau` taken from `plif_init_tau`.
    pub fn new(init: &mut Init, cfg: NeuronConfig, plif_init_tau: f32) -> Result<Self> {
        cfg.validate()?;
        let w = match cfg.kind {
            NeuronKind::Plif { .. } => Some(init.constant(&[1], -(plif_init_tau - 1.0).ln())?),
            _ => None,
        };
        Ok(Neuron { cfg, w })
    }

    /// A LIF neuron with SpikingJelly's defaults and time constant `tau`.
    pub fn lif(init: &mut Init, tau: f32) -> Result<Self> {
        Self::new(init, NeuronConfig::lif(tau), 2.0)
    }

    /// The configuration.
    pub fn config(&self) -> &NeuronConfig {
        &self.cfg
    }
}

impl Module for Neuron {
    fn type_name(&self) -> &'static str {
        match self.cfg.kind {
            NeuronKind::Lif { .. } => "LIFNode",
            NeuronKind::If => "IFNode",
            NeuronKind::Plif { .. } => "ParametricLIFNode",
        }
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let w = self.w.as_ref().map(|w| cx.param(w));
        Ok(vec![cx.final_op(|cx| ops::neuron(cx, &self.cfg, x, w.as_ref()))?])
    }

    fn params(&self) -> Vec<(&'static str, &Param)> {
        self.w.iter().map(|w| ("w", w)).collect()
    }
}

impl PlannerHints for Neuron {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.cfg))
    }

    fn is_stateful(&self) -> bool {
        true
    }

    /// About 8 FLOPs per element and time step (charge, fire, reset, surrogate inputs); reads
    /// the input and writes the spikes and the membrane potential kept for backward.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(ModuleCost {
            flops: elems(outputs).saturating_mul(8),
            bytes: f32_bytes(inputs).saturating_add(f32_bytes(outputs).saturating_mul(2)),
        })
    }
}
