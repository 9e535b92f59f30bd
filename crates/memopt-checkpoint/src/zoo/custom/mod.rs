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
//!   `--timesteps`, `--input` and `--batch` override it. `"spikes": true` declares that the
//!   input is spikes (every value 0 or 1, as event-camera frames are): a checkpoint of the first
//!   segment then keeps its input bit-packed, 1 bit per value instead of 32 (the batch itself
//!   stays in memory for the step, so this is a copy, measured like any other).
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
//! | `conv1d` | `out`, `kernel` (1), `stride` (1), `padding` (0), `bias` (true) | `[C, L]` -> `[out, L']` |
//! | `batch_norm` | none (momentum 0.1, eps 1e-5) | `[C, H, W]` (BatchNorm2d), `[C, L]` or `[F]` (BatchNorm1d), unchanged |
//! | `tokens` | none | `[C, H, W]` -> `[C, H * W]` |
//! | `attention` | `heads` (dividing `C`) | `[C, L]`, unchanged (SpikingJelly's `SpikingSelfAttention`) |
//! | `token_mean` | none | `[C, L]` -> `[C]` |
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
//! A spiking transformer block is `residual` around `attention`, then `residual` around an MLP
//! of `conv1d`, `batch_norm` and `lif` layers (see `examples/models/spikformer-tiny.json`).
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
//! let model = custom.build(custom.spec(), Device::META, 0).unwrap();
//! assert_eq!(model.name(), "tiny");
//! assert!(model.module("2.body.0").is_some());
//! ```

mod build;
mod layer;

pub use layer::{Layer, NeuronFields, SurrogateName};

use crate::model::{InputSpec, Model};
use crate::module::Init;
use crate::{CheckpointError, Result};
use build::{conv_params, conv1d_params, neuron_config, pool_params};
use layer::parse_layers;
use memopt_core::Device;
use serde::Deserialize;
use serde_json::Value;

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
    #[serde(default)]
    spikes: bool,
}

/// A model described in JSON (see the [module documentation](self) for the format).
#[derive(Debug, Clone, PartialEq)]
pub struct CustomModel {
    name: String,
    spec: InputSpec,
    layers: Vec<Layer>,
    spike_input: bool,
}

/// Most layers a model description may have, residual branches included: what `memopt
/// optimize` plans in under 20 s on two cores (its search grows with the square of the depth:
/// about 1 s at 1,000 layers, 15-17 s at 5,000).
pub const MAX_LAYERS: usize = 5_000;

/// Largest model description file read, in bytes (16 MiB).
pub const MAX_DESCRIPTION_BYTES: u64 = 16 << 20;

/// Layers of a chain, those inside residual branches included.
fn count_layers(layers: &[Layer]) -> usize {
    layers
        .iter()
        .map(|l| match l {
            Layer::Residual {
                body,
                shortcut,
                after,
            } => 1 + count_layers(body) + count_layers(shortcut) + count_layers(after),
            _ => 1,
        })
        .sum()
}

pub(super) fn invalid(msg: impl Into<String>) -> CheckpointError {
    CheckpointError::InvalidModel(msg.into())
}

impl CustomModel {
    /// Parses a model description. Syntax, unknown types or fields and out-of-range settings are
    /// errors naming the layer's position; shapes are checked against the description's input.
    pub fn from_json(text: &str) -> Result<CustomModel> {
        let raw: RawModel = crate::strict_json::from_str(text).map_err(invalid)?;
        if raw.name.trim().is_empty() {
            return Err(invalid("`name` must not be empty"));
        }
        let layers = parse_layers(&raw.layers, "layers")?;
        if layers.is_empty() {
            return Err(invalid("`layers` must list at least one layer"));
        }
        let count = count_layers(&layers);
        if count > MAX_LAYERS {
            return Err(invalid(format!(
                "{count} layers (residual branches included); a model description has at most {MAX_LAYERS}, \
                 the depth planned in under 20 s"
            )));
        }
        let model = CustomModel {
            name: raw.name,
            spec: InputSpec {
                time_steps: raw.input.time_steps,
                sample: raw.input.sample,
                classes: raw.input.classes,
            },
            layers,
            spike_input: raw.input.spikes,
        };
        model.check_settings(&model.layers, "layers")?;
        model.output_shape(&model.spec)?;
        Ok(model)
    }

    /// Reads and parses a model description file: a regular file of at most
    /// [`MAX_DESCRIPTION_BYTES`] bytes, UTF-8 with or without a byte-order mark, of at most
    /// [`MAX_LAYERS`] layers.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<CustomModel> {
        let path = path.as_ref();
        let text = memopt_core::input_file::read_bounded_text(path, MAX_DESCRIPTION_BYTES)
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
                }
                | Layer::Conv1d {
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
            if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
                return Err(CheckpointError::InvalidInput(format!(
                    "model '{}' {at} ({}) gives samples of shape {shape:?}, more elements than fit in the address space; make the layer or the input smaller",
                    self.name,
                    layer.type_name()
                )));
            }
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
        let tokens = |shape: &[usize]| -> Result<[usize; 2]> {
            match shape {
                [c, l] => Ok([*c, *l]),
                _ => Err(misfit(
                    "[C, L]",
                    "; add {\"type\": \"tokens\"} to make tokens of an image",
                )),
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
            Layer::Conv1d {
                out,
                kernel,
                stride,
                padding,
                ..
            } => {
                let [_, l] = tokens(shape)?;
                let [ol, _] = conv1d_params(*stride, *padding)
                    .as_2d()
                    .output_hw(l, 1, *kernel, 1)
                    .map_err(core)?;
                vec![*out, ol]
            }
            Layer::BatchNorm {} => match shape.len() {
                1..=3 => shape.to_vec(),
                _ => return Err(misfit("[C, H, W], [C, L] or [F]", "")),
            },
            Layer::Tokens {} => {
                let [c, h, w] = image(shape)?;
                vec![
                    c,
                    h.checked_mul(w)
                        .ok_or_else(|| misfit("[C, H, W] with H * W in the address space", ""))?,
                ]
            }
            Layer::Attention { heads } => {
                let [c, l] = tokens(shape)?;
                if *heads == 0 || !c.is_multiple_of(*heads) {
                    return Err(CheckpointError::InvalidInput(format!(
                        "model '{}' {at} (attention): {heads} heads do not divide the {c} channels; use a number of heads that does",
                        self.name
                    )));
                }
                vec![c, l]
            }
            Layer::TokenMean {} => {
                let [c, _] = tokens(shape)?;
                vec![c]
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
            Layer::Flatten {} => match shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) {
                Some(n) => vec![n],
                None => {
                    return Err(CheckpointError::InvalidInput(format!(
                        "model '{}' {at} (flatten): samples of shape {shape:?} have more elements than fit in the address space",
                        self.name
                    )));
                }
            },
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
        let (root, _) = self.build_chain(&mut init, &self.layers, &spec.sample, "layers")?;
        Ok(
            Model::new(self.name.clone(), Box::new(root), spec.clone(), device)
                .with_spike_input(self.spike_input),
        )
    }
}
