//! Custom models without Rust: a JSON description of a chain of layers and residual blocks.
//!
//! ```json
//! {
//!   "name": "small-snn",
//!   "input": { "time_steps": 4, "sample": [2, 16, 16], "classes": 10 },
//!   "layers": [
//!     { "type": "conv2d", "out": 8, "kernel": 3, "padding": 1 },
//!     { "type": "batch_norm" },
//!     { "type": "lif", "tau": 2.0 },
//!     { "type": "max_pool", "kernel": 2 },
//!     { "type": "residual",
//!       "body": [
//!         { "type": "conv2d", "out": 8, "kernel": 3, "padding": 1, "bias": false },
//!         { "type": "batch_norm" },
//!         { "type": "lif" },
//!         { "type": "conv2d", "out": 8, "kernel": 3, "padding": 1, "bias": false },
//!         { "type": "batch_norm" }
//!       ],
//!       "after": [ { "type": "lif" } ] },
//!     { "type": "flatten" },
//!     { "type": "dropout", "p": 0.1 },
//!     { "type": "linear", "out": 10 }
//!   ]
//! }
//! ```
//!
//! - `input`: time steps `T`, the shape of one sample (`[C, H, W]` for images, `[F]` for
//!   features) and the number of classes; the model takes `[T, N, sample...]`. The CLI's
//!   `--timesteps`, `--input` and `--batch` override it.
//! - `layers`: run in order. Input channels and features are never written: they are inferred
//!   by propagating the sample shape through the chain when the model is built, and a layer
//!   that does not fit its input is reported by its position (`layers[4].body[3]`) with the
//!   shape it got and the one it needs. The last layer must give `[classes]`.
//!
//! Layer types (`"type"`) and their fields, defaults in parentheses:
//!
//! | type | fields | input -> output |
//! |---|---|---|
//! | `conv2d` | `out`, `kernel`, `stride` (1), `padding` (0), `bias` (true) | `[C, H, W]` -> `[out, H', W']` |
//! | `batch_norm` | none (momentum 0.1, eps 1e-5) | `[C, H, W]` (BatchNorm2d) or `[F]` (BatchNorm1d), unchanged |
//! | `lif` | `tau` (2.0), `decay_input` (true), neuron fields | unchanged |
//! | `if` | neuron fields | unchanged |
//! | `plif` | `init_tau` (2.0), `decay_input` (true), neuron fields | unchanged |
//! | `max_pool`, `avg_pool` | `kernel`, `stride` (= kernel), `padding` (0) | `[C, H, W]` -> `[C, H', W']` |
//! | `adaptive_avg_pool` | `out` (`[h, w]`) | `[C, H, W]` -> `[C, h, w]` |
//! | `flatten` | none | any -> `[prod]` |
//! | `linear` | `out`, `bias` (true) | `[F]` -> `[out]` |
//! | `relu` | none | unchanged |
//! | `dropout` | `p` in `[0, 1)` (mask shared by the time steps) | unchanged |
//! | `residual` | `body`, `shortcut` ([] = identity), `after` ([]) | `after(body(x) + shortcut(x))` |
//!
//! Neuron fields (SpikingJelly's defaults): `v_threshold` (1.0), `v_reset` (0.0; `null` for a
//! soft reset), `detach_reset` (false), `surrogate` (`"sigmoid"` or `"atan"`, default sigmoid)
//! and `alpha` (4 for sigmoid, 2 for atan). Unknown fields and types are errors that list the
//! valid ones.
//!
//! Module paths follow the layer positions (`"3"`, `"4.body.0"`, `"4.shortcut.1"`, `"4.after.0"`),
//! so plans address them like zoo models.
//!
//! ```
//! use memopt_checkpoint::zoo::custom::CustomModel;
//! use memopt_core::Device;
//! let json = r#"{
//!   "name": "tiny",
//!   "input": {"time_steps": 2, "sample": [1, 8, 8], "classes": 3},
//!   "layers": [
//!     {"type": "conv2d", "out": 4, "kernel": 3, "padding": 1},
//!     {"type": "lif"},
//!     {"type": "residual", "body": [{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}],
//!      "after": [{"type": "lif"}]},
//!     {"type": "flatten"},
//!     {"type": "linear", "out": 3}
//!   ]
//! }"#;
//! let custom = CustomModel::from_json(json).unwrap();
//! let model = custom.build(custom.spec(), Device::Meta, 0).unwrap();
//! assert_eq!(model.name(), "tiny");
//! assert!(model.module("2.body.0").is_some());
//! ```

use super::one_input;
use crate::autograd::Var;
use crate::context::Cx;
use crate::model::{InputSpec, Model};
use crate::module::{
    BatchNorm, Conv2d, Dropout, Flatten, Init, Linear, Module, Neuron, Pool2d, Relu, Sequential,
};
use crate::{CheckpointError, Result, ops};
use memopt_core::Device;
use memopt_core::kernels::{Conv2dParams, NeuronConfig, NeuronKind, Pool2dParams, Surrogate};
use serde::Deserialize;
use serde_json::Value;

/// Surrogate gradient of a neuron's firing function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SurrogateName {
    /// `sigmoid(alpha x)` (alpha 4 by default).
    #[default]
    Sigmoid,
    /// `atan(pi/2 alpha x) / pi + 1/2` (alpha 2 by default).
    Atan,
}

/// Fields every neuron takes.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeuronFields {
    /// Firing threshold (1.0).
    #[serde(default = "one")]
    pub v_threshold: f32,
    /// Hard-reset potential (0.0); `null` for a soft reset (subtract the threshold).
    #[serde(default = "zero")]
    pub v_reset: Option<f32>,
    /// Whether backward ignores the reset's dependency on the spike (false).
    #[serde(default)]
    pub detach_reset: bool,
    /// Surrogate gradient (sigmoid).
    #[serde(default)]
    pub surrogate: SurrogateName,
    /// Surrogate steepness (4 for sigmoid, 2 for atan).
    #[serde(default)]
    pub alpha: Option<f32>,
    /// Time constant of a LIF neuron, in time steps (2.0; `lif` only).
    #[serde(default)]
    pub tau: Option<f32>,
    /// Initial time constant of a parametric LIF neuron (2.0; `plif` only).
    #[serde(default)]
    pub init_tau: Option<f32>,
    /// Whether the input is divided by tau too (true; `lif` and `plif` only).
    #[serde(default)]
    pub decay_input: Option<bool>,
}

fn one() -> f32 {
    1.0
}

fn zero() -> Option<f32> {
    Some(0.0)
}

fn yes() -> bool {
    true
}

/// One layer of a custom model, as written in JSON (`{"type": "conv2d", ...}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Layer {
    /// 2-D convolution with a square kernel; input channels inferred.
    Conv2d {
        /// Output channels.
        out: usize,
        /// Kernel size (square).
        kernel: usize,
        /// Stride (1).
        #[serde(default = "stride_one")]
        stride: usize,
        /// Zero padding on each side (0).
        #[serde(default)]
        padding: usize,
        /// Whether there is a bias (true).
        #[serde(default = "yes")]
        bias: bool,
    },
    /// Batch normalisation over the channels (2-D for images, 1-D for features).
    BatchNorm {},
    /// Leaky integrate-and-fire neuron.
    Lif(NeuronFields),
    /// Integrate-and-fire neuron.
    If(NeuronFields),
    /// Parametric LIF neuron (a learned time constant).
    Plif(NeuronFields),
    /// Max pooling.
    MaxPool {
        /// Window size (square).
        kernel: usize,
        /// Step between windows (the kernel size).
        #[serde(default)]
        stride: Option<usize>,
        /// Padding on each side (0), at most half the kernel.
        #[serde(default)]
        padding: usize,
    },
    /// Average pooling.
    AvgPool {
        /// Window size (square).
        kernel: usize,
        /// Step between windows (the kernel size).
        #[serde(default)]
        stride: Option<usize>,
        /// Padding on each side (0), at most half the kernel.
        #[serde(default)]
        padding: usize,
    },
    /// Adaptive average pooling to a fixed output size.
    AdaptiveAvgPool {
        /// Output `[h, w]`.
        out: [usize; 2],
    },
    /// Flattens each sample to `[features]`.
    Flatten {},
    /// Fully connected layer; input features inferred.
    Linear {
        /// Output features.
        out: usize,
        /// Whether there is a bias (true).
        #[serde(default = "yes")]
        bias: bool,
    },
    /// `max(x, 0)`.
    Relu {},
    /// Dropout with one mask shared by all time steps.
    Dropout {
        /// Drop probability in `[0, 1)`.
        p: f32,
    },
    /// `after(body(x) + shortcut(x))`; an empty shortcut is the identity.
    Residual {
        /// The main branch.
        body: Vec<Layer>,
        /// The shortcut branch ([] = identity).
        #[serde(default)]
        shortcut: Vec<Layer>,
        /// Layers after the sum ([]).
        #[serde(default)]
        after: Vec<Layer>,
    },
}

fn stride_one() -> usize {
    1
}

impl Layer {
    /// The `"type"` name as written in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            Layer::Conv2d { .. } => "conv2d",
            Layer::BatchNorm {} => "batch_norm",
            Layer::Lif(_) => "lif",
            Layer::If(_) => "if",
            Layer::Plif(_) => "plif",
            Layer::MaxPool { .. } => "max_pool",
            Layer::AvgPool { .. } => "avg_pool",
            Layer::AdaptiveAvgPool { .. } => "adaptive_avg_pool",
            Layer::Flatten {} => "flatten",
            Layer::Linear { .. } => "linear",
            Layer::Relu {} => "relu",
            Layer::Dropout { .. } => "dropout",
            Layer::Residual { .. } => "residual",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: String,
    input: RawInput,
    layers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    time_steps: usize,
    sample: Vec<usize>,
    classes: usize,
}

/// A model described in JSON (see the [module documentation](self) for the format).
#[derive(Debug, Clone, PartialEq)]
pub struct CustomModel {
    name: String,
    spec: InputSpec,
    layers: Vec<Layer>,
}

fn invalid(msg: impl Into<String>) -> CheckpointError {
    CheckpointError::InvalidModel(msg.into())
}

/// Parses `values` (the layers at `at`, e.g. `layers` or `layers[4].body`), naming the position
/// of the first bad layer in the error.
fn parse_layers(values: &[Value], at: &str) -> Result<Vec<Layer>> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| parse_layer(v, &format!("{at}[{i}]")))
        .collect()
}

fn parse_layer(v: &Value, at: &str) -> Result<Layer> {
    let obj = v.as_object().ok_or_else(|| {
        invalid(format!(
            "{at}: a layer is an object like {{\"type\": \"conv2d\", ...}}, got {v}"
        ))
    })?;
    if obj.get("type").and_then(Value::as_str) == Some("residual") {
        // Parsed by hand so that errors inside the branches name their position.
        for key in obj.keys() {
            if !["type", "body", "shortcut", "after"].contains(&key.as_str()) {
                return Err(invalid(format!(
                    "{at}: unknown field `{key}` of a residual block, expected one of `body`, `shortcut`, `after`"
                )));
            }
        }
        let branch = |name: &str, required: bool| -> Result<Vec<Layer>> {
            match obj.get(name) {
                None if required => Err(invalid(format!(
                    "{at}: a residual block needs a `{name}` list of layers"
                ))),
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => parse_layers(items, &format!("{at}.{name}")),
                Some(other) => Err(invalid(format!(
                    "{at}.{name}: expected a list of layers, got {other}"
                ))),
            }
        };
        let body = branch("body", true)?;
        if body.is_empty() {
            return Err(invalid(format!(
                "{at}.body: a residual block needs at least one layer in its body"
            )));
        }
        return Ok(Layer::Residual {
            body,
            shortcut: branch("shortcut", false)?,
            after: branch("after", false)?,
        });
    }
    serde_json::from_value(v.clone()).map_err(|e| invalid(format!("{at}: {e}")))
}

impl CustomModel {
    /// Parses a model description. Syntax, unknown types or fields and out-of-range settings are
    /// errors naming the layer's position; shapes are checked against the description's input.
    pub fn from_json(text: &str) -> Result<CustomModel> {
        let raw: RawModel = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if raw.name.trim().is_empty() {
            return Err(invalid("`name` must not be empty"));
        }
        let layers = parse_layers(&raw.layers, "layers")?;
        if layers.is_empty() {
            return Err(invalid("`layers` must list at least one layer"));
        }
        let model = CustomModel {
            name: raw.name,
            spec: InputSpec {
                time_steps: raw.input.time_steps,
                sample: raw.input.sample,
                classes: raw.input.classes,
            },
            layers,
        };
        model.check_settings(&model.layers, "layers")?;
        model.output_shape(&model.spec)?;
        Ok(model)
    }

    /// Reads and parses a model description file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<CustomModel> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| match e {
            CheckpointError::InvalidModel(m) => invalid(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The input written in the description.
    pub fn spec(&self) -> &InputSpec {
        &self.spec
    }

    /// The layers.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    fn check_settings(&self, layers: &[Layer], at: &str) -> Result<()> {
        for (i, layer) in layers.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let bad = |m: String| Err(invalid(format!("{at} ({}): {m}", layer.type_name())));
            match layer {
                Layer::Conv2d {
                    out, kernel, stride, ..
                } if *out == 0 || *kernel == 0 || *stride == 0 => {
                    return bad(format!(
                        "`out`, `kernel` and `stride` must be at least 1, got out {out}, kernel {kernel}, stride {stride}"
                    ));
                }
                Layer::Linear { out, .. } if *out == 0 => return bad("`out` must be at least 1".into()),
                Layer::MaxPool { kernel, stride, .. } | Layer::AvgPool { kernel, stride, .. }
                    if *kernel == 0 || *stride == Some(0) =>
                {
                    return bad("`kernel` and `stride` must be at least 1".into());
                }
                Layer::AdaptiveAvgPool { out } if out.contains(&0) => {
                    return bad(format!("`out` must be at least [1, 1], got {out:?}"));
                }
                Layer::Dropout { p } if !(0.0..1.0).contains(p) => {
                    return bad(format!("`p` must be in [0, 1), got {p}"));
                }
                Layer::Lif(f) | Layer::If(f) | Layer::Plif(f) => {
                    neuron_config(layer, f)
                        .map_err(|e| invalid(format!("{at} ({}): {e}", layer.type_name())))?;
                }
                Layer::Residual {
                    body,
                    shortcut,
                    after,
                } => {
                    self.check_settings(body, &format!("{at}.body"))?;
                    self.check_settings(shortcut, &format!("{at}.shortcut"))?;
                    self.check_settings(after, &format!("{at}.after"))?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The sample shape the chain gives for `spec`, checking every layer on the way; it must be
    /// `[classes]`.
    pub fn output_shape(&self, spec: &InputSpec) -> Result<Vec<usize>> {
        if spec.time_steps == 0 || spec.classes == 0 || spec.sample.is_empty() || spec.sample.contains(&0) {
            return Err(CheckpointError::InvalidInput(format!(
                "model '{}' needs T >= 1, classes >= 1 and a non-empty sample shape without zeros, got T={}, classes={}, sample={:?}",
                self.name, spec.time_steps, spec.classes, spec.sample
            )));
        }
        let out = self.propagate(&self.layers, spec.sample.clone(), "layers")?;
        if out != [spec.classes] {
            return Err(CheckpointError::InvalidInput(format!(
                "model '{}' must end with [classes] = [{}] to be trained on {} classes, but its last layer gives {out:?}; end with {{\"type\": \"linear\", \"out\": {}}}",
                self.name, spec.classes, spec.classes, spec.classes
            )));
        }
        Ok(out)
    }

    fn propagate(&self, layers: &[Layer], mut shape: Vec<usize>, at: &str) -> Result<Vec<usize>> {
        for (i, layer) in layers.iter().enumerate() {
            let at = format!("{at}[{i}]");
            shape = self.layer_output(layer, &shape, &at)?;
        }
        Ok(shape)
    }

    fn layer_output(&self, layer: &Layer, shape: &[usize], at: &str) -> Result<Vec<usize>> {
        let misfit = |needs: &str, hint: &str| {
            CheckpointError::InvalidInput(format!(
                "model '{}' {at} ({}) takes samples of shape {needs}, but gets {shape:?}{hint}",
                self.name,
                layer.type_name()
            ))
        };
        let image = |shape: &[usize]| -> Result<[usize; 3]> {
            match shape {
                [c, h, w] => Ok([*c, *h, *w]),
                _ => Err(misfit("[C, H, W]", "")),
            }
        };
        let core = |e: memopt_core::CoreError| {
            CheckpointError::InvalidInput(format!(
                "model '{}' {at} ({}) on samples of shape {shape:?}: {e}",
                self.name,
                layer.type_name()
            ))
        };
        Ok(match layer {
            Layer::Conv2d {
                out,
                kernel,
                stride,
                padding,
                ..
            } => {
                let [_, h, w] = image(shape)?;
                let [oh, ow] = conv_params(*stride, *padding)
                    .output_hw(h, w, *kernel, *kernel)
                    .map_err(core)?;
                vec![*out, oh, ow]
            }
            Layer::BatchNorm {} => match shape.len() {
                1 | 3 => shape.to_vec(),
                _ => return Err(misfit("[C, H, W] or [F]", "")),
            },
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
                let [c, h, w] = image(shape)?;
                let [oh, ow] = pool_params(*kernel, *stride, *padding)
                    .output_hw([h, w])
                    .map_err(core)?;
                vec![c, oh, ow]
            }
            Layer::AdaptiveAvgPool { out } => {
                let [c, _, _] = image(shape)?;
                vec![c, out[0], out[1]]
            }
            Layer::Flatten {} => vec![shape.iter().product()],
            Layer::Linear { out, .. } => match shape {
                [_] => vec![*out],
                _ => {
                    return Err(misfit("[F]", "; add {\"type\": \"flatten\"} before it"));
                }
            },
            Layer::Lif(_) | Layer::If(_) | Layer::Plif(_) | Layer::Relu {} | Layer::Dropout { .. } => {
                shape.to_vec()
            }
            Layer::Residual {
                body,
                shortcut,
                after,
            } => {
                let b = self.propagate(body, shape.to_vec(), &format!("{at}.body"))?;
                let s = self.propagate(shortcut, shape.to_vec(), &format!("{at}.shortcut"))?;
                if b != s {
                    return Err(CheckpointError::InvalidInput(format!(
                        "model '{}' {at} (residual): the body gives {b:?} but the shortcut gives {s:?}; they must match to be added{}",
                        self.name,
                        if shortcut.is_empty() {
                            " (an empty shortcut is the identity: add a conv2d to change channels or size)"
                        } else {
                            ""
                        }
                    )));
                }
                self.propagate(after, b, &format!("{at}.after"))?
            }
        })
    }

    /// Builds the model for `spec` (the description's own [`CustomModel::spec`] or an override
    /// of its time steps, sample shape or classes) on `device`, parameters drawn from stream
    /// `seed`. A layer that does not fit its input is an error naming it.
    pub fn build(&self, spec: &InputSpec, device: Device, seed: u64) -> Result<Model> {
        self.output_shape(spec)?;
        let mut init = Init::new(device, seed);
        let (root, _) = build_chain(&mut init, &self.layers, &spec.sample)?;
        Ok(Model::new(
            self.name.clone(),
            Box::new(root),
            spec.clone(),
            device,
        ))
    }
}

fn conv_params(stride: usize, padding: usize) -> Conv2dParams {
    Conv2dParams {
        stride: [stride; 2],
        padding: [padding; 2],
        ..Conv2dParams::default()
    }
}

fn pool_params(kernel: usize, stride: Option<usize>, padding: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel; 2],
        stride: [stride.unwrap_or(kernel); 2],
        padding: [padding; 2],
    }
}

fn neuron_config(layer: &Layer, f: &NeuronFields) -> memopt_core::Result<NeuronConfig> {
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
fn build_chain(init: &mut Init, layers: &[Layer], shape: &[usize]) -> Result<(Sequential, Vec<usize>)> {
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
