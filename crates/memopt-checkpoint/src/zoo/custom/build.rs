//! Building a described model's modules, and the residual block they may contain.

use super::layer::{Layer, NeuronFields, SurrogateName};
use crate::autograd::Var;
use crate::context::Cx;
use crate::module::{
    BatchNorm, Conv2d, Dropout, Flatten, Init, Linear, Module, Neuron, Pool2d, Relu, Sequential,
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

/// Builds `layers` as a [`Sequential`] for samples of `shape` (already checked by
/// [`CustomModel::output_shape`]); returns it with the shape it gives.
pub(super) fn build_chain(
    init: &mut Init,
    layers: &[Layer],
    shape: &[usize],
) -> Result<(Sequential, Vec<usize>)> {
    let mut seq = Sequential::new();
    let mut shape = shape.to_vec();
    for layer in layers {
        let (module, next) = build_layer(init, layer, &shape)?;
        seq = seq.push_boxed(module);
        shape = next;
    }
    Ok((seq, shape))
}

fn build_layer(init: &mut Init, layer: &Layer, shape: &[usize]) -> Result<(Box<dyn Module>, Vec<usize>)> {
    // Shapes were checked by `output_shape` before building, so each layer's required rank
    // holds here and the indexing below is in bounds.
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
            let [oh, ow] = p.output_hw(shape[1], shape[2], *kernel, *kernel)?;
            (
                Box::new(Conv2d::new(init, channels, *out, *kernel, p, *bias)?),
                vec![*out, oh, ow],
            )
        }
        Layer::BatchNorm {} => {
            let bn = if shape.len() == 3 {
                BatchNorm::new_2d(init, channels)?
            } else {
                BatchNorm::new_1d(init, channels)?
            };
            (Box::new(bn), shape.to_vec())
        }
        Layer::Lif(f) | Layer::If(f) | Layer::Plif(f) => {
            let cfg = neuron_config(layer, f)?;
            (
                Box::new(Neuron::new(init, cfg, f.init_tau.unwrap_or(2.0))?),
                shape.to_vec(),
            )
        }
        Layer::MaxPool {
            kernel,
            stride,
            padding,
        }
        | Layer::AvgPool {
            kernel,
            stride,
            padding,
        } => {
            let p = pool_params(*kernel, *stride, *padding);
            let [oh, ow] = p.output_hw([shape[1], shape[2]])?;
            let s = stride.unwrap_or(*kernel);
            let m = if matches!(layer, Layer::MaxPool { .. }) {
                Pool2d::max(*kernel, s, *padding)
            } else {
                Pool2d::avg(*kernel, s, *padding)
            };
            (Box::new(m), vec![channels, oh, ow])
        }
        Layer::AdaptiveAvgPool { out } => (
            Box::new(Pool2d::adaptive_avg(*out)),
            vec![channels, out[0], out[1]],
        ),
        Layer::Flatten {} => (Box::new(Flatten::new(2)), vec![shape.iter().product()]),
        Layer::Linear { out, bias } => (Box::new(Linear::new(init, channels, *out, *bias)?), vec![*out]),
        Layer::Relu {} => (Box::new(Relu), shape.to_vec()),
        Layer::Dropout { p } => (Box::new(Dropout::new(*p)), shape.to_vec()),
        Layer::Residual {
            body,
            shortcut,
            after,
        } => {
            let (body, sum_shape) = build_chain(init, body, shape)?;
            let shortcut = if shortcut.is_empty() {
                None
            } else {
                Some(build_chain(init, shortcut, shape)?.0)
            };
            let (after, out_shape) = if after.is_empty() {
                (None, sum_shape)
            } else {
                let (seq, out) = build_chain(init, after, &sum_shape)?;
                (Some(seq), out)
            };
            (
                Box::new(Residual {
                    body,
                    shortcut,
                    after,
                }),
                out_shape,
            )
        }
    })
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

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Result<Vec<Var>> {
        let x = one_input(inputs, "Residual")?;
        let b = cx.call1("body", &self.body, x.clone())?;
        let s = match &self.shortcut {
            Some(sc) => cx.call1("shortcut", sc, x)?,
            None => x,
        };
        let y = ops::add(cx, &b, &s)?;
        Ok(vec![match &self.after {
            Some(after) => cx.call1("after", after, y)?,
            None => y,
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
