//! Stochastic gradient descent with momentum and weight decay (torch.optim.SGD semantics).

use super::{Optimizer, StateTensor};
use crate::Result;
use crate::model::Model;
use crate::param::{Param, ParamId};
use memopt_core::kernels::{self, SgdConfig};
use memopt_core::{DType, MemoryKind, Tensor};
use std::collections::BTreeMap;

/// SGD. With momentum it keeps one buffer per parameter.
#[derive(Debug)]
pub struct Sgd {
    cfg: SgdConfig,
    momentum: BTreeMap<ParamId, Tensor>,
    steps: u64,
}

impl Sgd {
    /// SGD for `model`'s parameters; allocates the momentum buffers when `cfg.momentum != 0`.
    pub fn new(model: &Model, cfg: SgdConfig) -> Result<Self> {
        let mut momentum = BTreeMap::new();
        if cfg.momentum != 0.0 {
            for (_, p) in model.params() {
                let t = p.tensor();
                momentum.insert(
                    p.id(),
                    Tensor::zeros(
                        t.shape().clone(),
                        DType::F32,
                        t.device(),
                        MemoryKind::OptimizerState,
                    )?,
                );
            }
        }
        Ok(Sgd {
            cfg,
            momentum,
            steps: 0,
        })
    }

    /// Plain SGD with learning rate `lr`.
    pub fn plain(model: &Model, lr: f32) -> Result<Self> {
        Self::new(
            model,
            SgdConfig {
                lr,
                momentum: 0.0,
                dampening: 0.0,
                weight_decay: 0.0,
                nesterov: false,
            },
        )
    }
}

impl Optimizer for Sgd {
    fn name(&self) -> &'static str {
        "sgd"
    }

    fn update(&mut self, param: &Param, grad: &Tensor) -> Result<()> {
        kernels::sgd_step(
            param.tensor(),
            grad,
            self.momentum.get(&param.id()),
            &self.cfg,
            self.steps == 0,
        )?;
        Ok(())
    }

    fn finish_step(&mut self) {
        self.steps += 1;
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
        self.momentum
            .iter()
            .map(|(id, t)| StateTensor {
                param: *id,
                name: "momentum_buffer",
                tensor: t.clone(),
            })
            .collect()
    }

    fn step_count(&self) -> u64 {
        self.steps
    }

    fn set_step_count(&mut self, steps: u64) {
        self.steps = steps;
    }
}
