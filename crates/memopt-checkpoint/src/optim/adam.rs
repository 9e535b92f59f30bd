//! Adam (torch.optim.Adam semantics, L2 weight decay).

use super::{Optimizer, StateTensor};
use crate::Result;
use crate::model::Model;
use crate::param::{Param, ParamId};
use memopt_core::kernels::{self, AdamConfig};
use memopt_core::{DType, MemoryKind, Tensor};
use std::collections::BTreeMap;

/// Adam; keeps two moment buffers per parameter.
#[derive(Debug)]
pub struct Adam {
    cfg: AdamConfig,
    moments: BTreeMap<ParamId, (Tensor, Tensor)>,
    step: u64,
}

impl Adam {
    /// Adam for `model`'s parameters; allocates both moment buffers now.
    pub fn new(model: &Model, cfg: AdamConfig) -> Result<Self> {
        let mut moments = BTreeMap::new();
        for (_, p) in model.params() {
            let t = p.tensor();
            let z = || {
                Tensor::zeros(
                    t.shape().clone(),
                    DType::F32,
                    t.device(),
                    MemoryKind::OptimizerState,
                )
            };
            moments.insert(p.id(), (z()?, z()?));
        }
        Ok(Adam {
            cfg,
            moments,
            step: 0,
        })
    }
}

impl Optimizer for Adam {
    fn name(&self) -> &'static str {
        "adam"
    }

    fn update(&mut self, param: &Param, grad: &Tensor) -> Result<()> {
        let Some((m, v)) = self.moments.get(&param.id()) else {
            return Ok(());
        };
        // The step being taken: `finish_step` counts it once every parameter is updated.
        kernels::adam_step(kernels::AdamStep {
            param: param.tensor(),
            grad,
            m,
            v,
            cfg: &self.cfg,
            step: self.step + 1,
        })?;
        Ok(())
    }

    fn finish_step(&mut self) {
        self.step += 1;
    }

    fn learning_rate(&self) -> f32 {
        self.cfg.lr
    }

    fn set_learning_rate(&mut self, lr: f32) -> Result<()> {
        super::check_lr(lr)?;
        self.cfg.lr = lr;
        Ok(())
    }

    fn state_tensors(&self) -> Vec<StateTensor> {
        let mut out = Vec::with_capacity(2 * self.moments.len());
        for (id, (m, v)) in &self.moments {
            for (name, t) in [("exp_avg", m), ("exp_avg_sq", v)] {
                out.push(StateTensor {
                    param: *id,
                    name,
                    tensor: t.clone(),
                });
            }
        }
        out
    }

    fn step_count(&self) -> u64 {
        self.step
    }

    fn set_step_count(&mut self, steps: u64) {
        self.step = steps;
    }
}
