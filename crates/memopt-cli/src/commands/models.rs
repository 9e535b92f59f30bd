//! `memopt models`: the zoo with parameter counts and input sizes.

use crate::error::Result;
use crate::out;
use crate::selection::count;
use memopt_checkpoint::{InputSpec, zoo};
use memopt_core::{Device, MemoryTracker};
use serde::Serialize;
use std::io::Write;

/// Long help of `memopt models`, which documents custom models too.
pub const LONG_ABOUT: &str = "\
List the model zoo: each model's parameter count and its two input sizes. `small` is what every
command uses by default (a step takes well under a second on a CPU); `published` is the size of
the published workload (select it with --published, or set --timesteps/--input/--batch).

Custom models: any command's --model also takes a JSON file describing a chain of layers and
residual blocks; input channels are inferred. A complete example is examples/models/small-snn.json:

  {\"name\": \"small-snn\",
   \"input\": {\"time_steps\": 4, \"sample\": [2, 16, 16], \"classes\": 10, \"spikes\": true},
   \"layers\": [
     {\"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1},
     {\"type\": \"batch_norm\"},
     {\"type\": \"lif\", \"tau\": 2.0},
     {\"type\": \"max_pool\", \"kernel\": 2},
     {\"type\": \"residual\",
      \"body\": [{\"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1}, {\"type\": \"batch_norm\"}],
      \"after\": [{\"type\": \"lif\"}]},
     {\"type\": \"flatten\"},
     {\"type\": \"linear\", \"out\": 10}]}

Layer types: conv2d (out, kernel, stride=1, padding=0, bias=true), batch_norm, lif (tau=2,
decay_input=true), if, plif (init_tau=2), max_pool / avg_pool (kernel, stride=kernel, padding=0),
adaptive_avg_pool (out=[h, w]), flatten, linear (out, bias=true), relu, dropout (p),
residual (body, shortcut=[] for the identity, after=[]). For spiking transformers: tokens
([C, H, W] -> [C, H*W]), conv1d (out, kernel=1, stride=1, padding=0, bias=true), attention
(heads; SpikingJelly's SpikingSelfAttention), token_mean ([C, L] -> [C]); batch_norm on tokens
is BatchNorm1d. Example: examples/models/spikformer-tiny.json. Neurons also take v_threshold=1,
v_reset=0 (null: soft reset), detach_reset=false, surrogate=\"sigmoid\"|\"atan\", alpha.
\"spikes\": true declares that the input is spikes (values 0 or 1, as event frames are): a
checkpoint of the first segment then keeps its input bit-packed (1 bit per value).
The full reference is the documentation of memopt_checkpoint::zoo::custom.";

/// Options of `memopt models`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelsArgs {
    /// Print JSON: a list of {name, description, small, published} with parameter counts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Size {
    time_steps: usize,
    sample: Vec<usize>,
    classes: usize,
    parameters: usize,
}

#[derive(Serialize)]
struct Row {
    name: &'static str,
    description: &'static str,
    small: Size,
    published: Size,
}

fn size(name: &str, spec: &InputSpec) -> Result<Size> {
    let _scratch = MemoryTracker::install(MemoryTracker::new(Device::META));
    let model = zoo::build(name, spec, Device::META, 0)?;
    Ok(Size {
        time_steps: spec.time_steps,
        sample: spec.sample.clone(),
        classes: spec.classes,
        parameters: model.param_count(),
    })
}

fn shape(s: &Size) -> String {
    let sample: Vec<String> = s.sample.iter().map(ToString::to_string).collect();
    format!("T={} {} K={}", s.time_steps, sample.join("x"), s.classes)
}

/// Prints the zoo.
pub fn run(args: &ModelsArgs, out: &mut dyn Write) -> Result<()> {
    let mut rows = Vec::new();
    for e in zoo::entries() {
        rows.push(Row {
            name: e.name,
            description: e.description,
            small: size(e.name, &e.small)?,
            published: size(e.name, &e.published)?,
        });
    }
    if args.json {
        let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
        return out!(out, "{text}");
    }
    // The name column fits the longest name.
    let w = rows
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max("model".len());
    out!(
        out,
        "{:<w$} {:>8} {:<22} {:>8} {:<24}  description",
        "model",
        "params",
        "small (default)",
        "params",
        "published (--published)"
    )?;
    for r in &rows {
        out!(
            out,
            "{:<w$} {:>8} {:<22} {:>8} {:<24}  {}",
            r.name,
            count(r.small.parameters),
            shape(&r.small),
            count(r.published.parameters),
            shape(&r.published),
            r.description
        )?;
    }
    out!(
        out,
        "\nT = time steps, then the shape of one sample, K = classes. Batch size: --batch (default {}).\n\
         Custom models: --model FILE.json (format: `memopt models --help`, example: examples/models/small-snn.json).",
        crate::selection::DEFAULT_BATCH
    )
}
