//! Building a described model's modules, and the residual block they may contain.

use super::CustomModel;
use super::layer::{Layer, NeuronFields, SurrogateName};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::module::{
    BatchNorm, Conv1d, Conv2d, Dropout, Flatten, Init, Linear, Mean, Module, Neuron, PlannerHints, Pool2d,
    Relu, Sequential, SpikingSelfAttention,
};
use crate::zoo::one_input;
use crate::{Result, ops};
use memopt_core::kernels::{Conv2dParams, NeuronConfig, NeuronKind, Pool2dParams, Surrogate};

pub(super) fn conv_params(stride: usize, padding: usize) -> Conv2dParams {
    Conv2dParams {
        stride: [stride; 2],
        padding: [padding; 2],
        ..Conv2dParams::default()
    }
}

pub(super) fn conv1d_params(stride: usize, padding: usize) -> ops::Conv1dParams {
    ops::Conv1dParams {
        stride,
        padding,
        ..ops::Conv1dParams::default()
    }
}

pub(super) fn pool_params(kernel: usize, stride: Option<usize>, padding: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel; 2],
        stride: [stride.unwrap_or(kernel); 2],
        padding: [padding; 2],
    }
}

pub(super) fn neuron_config(layer: &Layer, f: &NeuronFields) -> memopt_core::Result<NeuronConfig> {
    let misplaced = |field: &str, valid: &str| {
        Err(memopt_core::CoreError::invalid(
            "custom model",
            format!("`{field}` applies to {valid} neurons only"),
        ))
    };
    let kind = match layer {
        Layer::Lif(_) => {
            if f.init_tau.is_some() {
                return misplaced("init_tau", "plif");
            }
            NeuronKind::Lif {
                tau: f.tau.unwrap_or(2.0),
                decay_input: f.decay_input.unwrap_or(true),
            }
        }
        Layer::Plif(_) => {
            if f.tau.is_some() {
                return misplaced("tau", "lif (plif learns its time constant from `init_tau`)");
            }
            NeuronKind::Plif {
                decay_input: f.decay_input.unwrap_or(true),
            }
        }
        _ => {
            if f.tau.is_some() || f.init_tau.is_some() || f.decay_input.is_some() {
                return misplaced("tau`, `init_tau` and `decay_input", "lif and plif");
            }
            NeuronKind::If
        }
    };
    let surrogate = match f.surrogate {
        SurrogateName::Sigmoid => Surrogate::Sigmoid {
            alpha: f.alpha.unwrap_or(4.0),
        },
        SurrogateName::Atan => Surrogate::ATan {
            alpha: f.alpha.unwrap_or(2.0),
        },
    };
    let cfg = NeuronConfig {
        kind,
        v_threshold: f.v_threshold,
        v_reset: f.v_reset,
        detach_reset: f.detach_reset,
        surrogate,
    };
    cfg.validate()?;
    if let Some(t) = f.init_tau
        && !(t > 1.0 && t.is_finite())
    {
        return Err(memopt_core::CoreError::invalid(
            "custom model",
            format!("`init_tau` must be finite and > 1 (time steps), got {t}"),
        ));
    }
    Ok(cfg)
}

impl CustomModel {
    /// Builds `layers` (at `at`, e.g. `layers[4].body`) as a [`Sequential`] for samples of
    /// `shape`; returns it with the shape it gives. Shapes come from
    /// [`CustomModel::layer_output`], the same rule that checked them before building.
    pub(super) fn build_chain(
        &self,
        init: &mut Init,
        layers: &[Layer],
        shape: &[usize],
        at: &str,
    ) -> Result<(Sequential, Vec<usize>)> {
        let mut seq = Sequential::new();
        let mut shape = shape.to_vec();
        for (i, layer) in layers.iter().enumerate() {
            let at = format!("{at}[{i}]");
            seq = seq.push_boxed(self.build_layer(init, layer, &shape, &at)?);
            shape = self.layer_output(layer, &shape, &at)?;
        }
        Ok((seq, shape))
    }

    /// The module of `layer` for samples of `shape` (checked by `layer_output`: every rank a
    /// layer needs holds here).
    fn build_layer(
        &self,
        init: &mut Init,
        layer: &Layer,
        shape: &[usize],
        at: &str,
    ) -> Result<Box<dyn Module>> {
        let channels = shape.first().copied().unwrap_or(1);
        Ok(match layer {
            Layer::Conv2d {
                out,
                kernel,
                stride,
                padding,
                bias,
            } => {
                let p = conv_params(*stride, *padding);
                Box::new(Conv2d::new(init, channels, *out, *kernel, p, *bias)?)
            }
            Layer::Conv1d {
                out,
                kernel,
                stride,
                padding,
                bias,
            } => {
                let p = conv1d_params(*stride, *padding);
                Box::new(Conv1d::new(init, channels, *out, *kernel, p, *bias)?)
            }
            Layer::BatchNorm {} if shape.len() == 3 => Box::new(BatchNorm::new_2d(init, channels)?),
            Layer::BatchNorm {} if shape.len() == 2 => Box::new(BatchNorm::new_1d_tokens(init, channels)?),
            Layer::BatchNorm {} => Box::new(BatchNorm::new_1d(init, channels)?),
            // [T, N, C, H, W] -> [T, N, C, H * W].
            Layer::Tokens {} => Box::new(Flatten::new(3)),
            Layer::Attention { heads } => Box::new(SpikingSelfAttention::new(init, channels, *heads)?),
            Layer::TokenMean {} => Box::new(Mean::new(3)),
            Layer::Lif(f) | Layer::If(f) | Layer::Plif(f) => {
                let cfg = neuron_config(layer, f)?;
                Box::new(Neuron::new(init, cfg, f.init_tau.unwrap_or(2.0))?)
            }
            Layer::MaxPool {
                kernel,
                stride,
                padding,
            } => Box::new(Pool2d::max(*kernel, stride.unwrap_or(*kernel), *padding)),
            Layer::AvgPool {
                kernel,
                stride,
                padding,
            } => Box::new(Pool2d::avg(*kernel, stride.unwrap_or(*kernel), *padding)),
            Layer::AdaptiveAvgPool { out } => Box::new(Pool2d::adaptive_avg(*out)),
            Layer::Flatten {} => Box::new(Flatten::new(2)),
            Layer::Linear { out, bias } => Box::new(Linear::new(init, channels, *out, *bias)?),
            Layer::Relu {} => Box::new(Relu),
            Layer::Dropout { p } => Box::new(Dropout::new(*p)),
            Layer::Residual {
                body,
                shortcut,
                after,
            } => {
                let (body, sum_shape) = self.build_chain(init, body, shape, &format!("{at}.body"))?;
                let shortcut = if shortcut.is_empty() {
                    None
                } else {
                    Some(
                        self.build_chain(init, shortcut, shape, &format!("{at}.shortcut"))?
                            .0,
                    )
                };
                let after = if after.is_empty() {
                    None
                } else {
                    Some(
                        self.build_chain(init, after, &sum_shape, &format!("{at}.after"))?
                            .0,
                    )
                };
                Box::new(Residual {
                    body,
                    shortcut,
                    after,
                })
            }
        })
    }
}

/// A residual block of a custom model: `after(body(x) + shortcut(x))`, children `body`,
/// `shortcut` (absent for the identity) and `after` (absent when empty).
struct Residual {
    body: Sequential,
    shortcut: Option<Sequential>,
    after: Option<Sequential>,
}

impl Module for Residual {
    fn type_name(&self) -> &'static str {
        "Residual"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, "Residual")?;
        let b = cx.call1("body", &self.body, x.clone())?;
        let s = match &self.shortcut {
            Some(sc) => cx.call1("shortcut", sc, x)?,
            None => x,
        };
        Ok(vec![match &self.after {
            Some(after) => {
                let y = ops::add(cx, b, s)?;
                cx.final_op(|cx| cx.call1("after", after, y))?
            }
            None => cx.final_op(|cx| ops::add(cx, b, s))?,
        }])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("body".into(), &self.body)];
        if let Some(sc) = &self.shortcut {
            c.push(("shortcut".into(), sc));
        }
        if let Some(a) = &self.after {
            c.push(("after".into(), a));
        }
        c
    }
}

impl PlannerHints for Residual {
    fn config_key(&self) -> Option<String> {
        Some(format!(
            "shortcut={} after={}",
            self.shortcut.is_some(),
            self.after.is_some()
        ))
    }
}
