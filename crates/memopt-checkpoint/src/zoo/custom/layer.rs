//! The layers of a model description: their JSON fields, defaults and parsing.

use super::invalid;
use crate::Result;
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
    /// 1-D convolution over tokens `[C, L]`; input channels inferred. A 1x1 projection of the
    /// spiking transformers with the defaults.
    Conv1d {
        /// Output channels.
        out: usize,
        /// Kernel size (1).
        #[serde(default = "kernel_one")]
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
    /// Batch normalisation over the channels (2-D for images, 1-D for features or tokens).
    BatchNorm {},
    /// An image's positions as tokens: `[C, H, W]` -> `[C, H * W]` (a view).
    Tokens {},
    /// Spiking self-attention over tokens `[C, L]`, as SpikingJelly's `SpikingSelfAttention`
    /// (Q, K, V from a 1x1 Conv1d + BatchNorm1d and a LIF, `(V K^T) Q * 0.125` per head, a
    /// LIF, a projection). Wrap it in a `residual` block for a transformer's skip connection.
    Attention {
        /// Heads; they divide the channels.
        heads: usize,
    },
    /// The mean over the tokens: `[C, L]` -> `[C]`.
    TokenMean {},
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

fn kernel_one() -> usize {
    1
}

impl Layer {
    /// The `"type"` name as written in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            Layer::Conv2d { .. } => "conv2d",
            Layer::Conv1d { .. } => "conv1d",
            Layer::BatchNorm {} => "batch_norm",
            Layer::Tokens {} => "tokens",
            Layer::Attention { .. } => "attention",
            Layer::TokenMean {} => "token_mean",
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

/// Parses `values` (the layers at `at`, e.g. `layers` or `layers[4].body`), naming the position
/// of the first bad layer in the error.
pub(super) fn parse_layers(values: &[Value], at: &str) -> Result<Vec<Layer>> {
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
