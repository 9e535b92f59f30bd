//! Which model, at which size: `--model`, `--batch`, `--timesteps`, `--input`, `--classes`,
//! `--published`, `--optimizer`, `--seed`, resolved into a profiler [`Workload`].

use crate::error::{CliError, Result};
use crate::files::read_input;
use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{InputSpec, zoo};
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::{OptimizerChoice, Workload};
use std::path::Path;
use std::sync::Arc;

/// The model `optimize`, `bench` and `plot` use when `--model` is not given.
pub const DEFAULT_MODEL: &str = "cifar10dvs-vgg";

/// Samples per batch when `--batch` is not given.
pub const DEFAULT_BATCH: usize = 4;

/// The optimizer of the step (its state is part of the memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerName {
    /// SGD with momentum 0.9, learning rate 0.1 (one state buffer per parameter).
    Sgd,
    /// Adam with PyTorch's defaults (two state buffers per parameter).
    Adam,
}

/// Options choosing the model and its size.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Model and size")]
pub struct ModelArgs {
    /// A zoo model (see `memopt models`) or a JSON model file (see `memopt models --help`).
    #[arg(short, long, value_name = "NAME|FILE.json")]
    pub model: Option<String>,
    /// Samples per batch, N [default: 4].
    #[arg(short = 'n', long, value_name = "N", value_parser = positive, allow_hyphen_values = true)]
    pub batch: Option<usize>,
    /// Time steps, T [default: the model's small size, see `memopt models`].
    #[arg(short = 't', long, value_name = "T", value_parser = positive, allow_hyphen_values = true)]
    pub timesteps: Option<usize>,
    /// Shape of one sample: CxHxW for images (e.g. 2x48x48), F for features (e.g. 512).
    #[arg(long, value_name = "CxHxW")]
    pub input: Option<String>,
    /// Number of classes of the labels.
    #[arg(long, value_name = "K", value_parser = positive, allow_hyphen_values = true)]
    pub classes: Option<usize>,
    /// Start from the model's published input size (T, sample, classes) instead of the small
    /// one that runs in seconds on a CPU; the options above still override it.
    #[arg(long)]
    pub published: bool,
    /// Optimizer whose state counts in the memory [default: sgd].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerName>,
    /// Seed of the parameters, dropout masks and synthetic data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// A resolved model choice: the workload to profile or plan, and what it is.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The workload (model, batch size, optimizer, seeds).
    pub workload: Workload,
    /// The input the model is built for.
    pub spec: InputSpec,
    /// Parameter count, in elements.
    pub params: usize,
}

impl Selection {
    /// The model's name.
    pub fn name(&self) -> &str {
        self.workload.name()
    }

    /// One line: `cifar10dvs-vgg: T=4 N=4 input [2, 48, 48], 10 classes, sgd, 9.23M parameters`.
    pub fn describe(&self) -> String {
        format!(
            "{}: T={} N={} input {:?}, {} classes, {}, {} parameters",
            self.name(),
            self.spec.time_steps,
            self.workload.batch_size,
            self.spec.sample,
            self.spec.classes,
            self.workload.optimizer.name(),
            count(self.params)
        )
    }
}

/// Parses a count that must be a positive whole number (`--batch`, `--timesteps`, `--steps`):
/// `-1`, `0`, `2.5` and numbers beyond the address space are errors that say so.
pub fn positive(s: &str) -> std::result::Result<usize, String> {
    match whole(s)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

/// Parses a whole number (`--steps`, `--runs`; a command says itself when 0 is not allowed):
/// `-1`, `2.5` and numbers beyond the address space are errors that say so.
pub fn whole(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    match t.parse::<usize>() {
        Ok(n) => Ok(n),
        Err(_) if t.starts_with('-') => Err(format!("must be a positive whole number (1, 2, ...), got {t}")),
        Err(_) if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) => Err(format!(
            "{t} is beyond the largest supported value, {}",
            usize::MAX
        )),
        Err(_) => Err(format!("must be a positive whole number (1, 2, ...), got '{t}'")),
    }
}

/// `1234567` -> `1.23M`.
pub fn count(n: usize) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}M", n as f64 / 1e6),
        _ => format!("{:.2}G", n as f64 / 1e9),
    }
}

/// Parses `CxHxW`, `C,H,W` or `F`.
pub fn parse_sample(s: &str) -> Result<Vec<usize>> {
    let dims: Option<Vec<usize>> = s
        .split(['x', 'X', ','])
        .map(|d| d.trim().parse().ok().filter(|&v: &usize| v > 0))
        .collect();
    dims.filter(|d| !d.is_empty()).ok_or_else(|| {
        CliError::Usage(format!(
            "cannot read --input '{s}': write the shape of one sample as CxHxW (e.g. 2x48x48) or F (e.g. 512), every dimension at least 1"
        ))
    })
}

/// The example models shipped in the binary, by their path in the repository: a relative
/// `--model examples/models/small-snn.json` (or `spikformer-tiny.json`) that does not exist in the current directory reads
/// the shipped copy, so that the examples in `--help` work from any directory.
const SHIPPED_MODELS: [(&str, &str); 2] = [
    (
        "examples/models/small-snn.json",
        include_str!("../../../examples/models/small-snn.json"),
    ),
    (
        "examples/models/spikformer-tiny.json",
        include_str!("../../../examples/models/spikformer-tiny.json"),
    ),
];

/// The shipped copy of a relative model path missing from the current directory.
fn shipped_model(model: &str) -> Option<&'static str> {
    let path = Path::new(model);
    if path.is_absolute() || path.exists() {
        return None;
    }
    let normal = model.trim_start_matches("./").replace('\\', "/");
    SHIPPED_MODELS
        .iter()
        .find(|(name, _)| *name == normal)
        .map(|(_, json)| *json)
}

fn looks_like_file(model: &str) -> bool {
    model.ends_with(".json") || model.contains('/') || model.contains('\\')
}

impl ModelArgs {
    /// The options as they would be typed (`-m sew-resnet18 --batch 400`), to suggest commands
    /// for the same model and size.
    pub fn command_line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("-m {}", crate::escape::shell_word(m)));
        }
        if self.published {
            parts.push("--published".into());
        }
        if let Some(n) = self.batch {
            parts.push(format!("--batch {n}"));
        }
        if let Some(t) = self.timesteps {
            parts.push(format!("--timesteps {t}"));
        }
        if let Some(i) = &self.input {
            parts.push(format!("--input {}", crate::escape::shell_word(i)));
        }
        if let Some(k) = self.classes {
            parts.push(format!("--classes {k}"));
        }
        if self.optimizer == Some(OptimizerName::Adam) {
            parts.push("--optimizer adam".into());
        }
        parts.join(" ")
    }

    /// Resolves the options into a workload, `default_model` standing in for a missing
    /// `--model` (an error when `None`). The model is built once on Meta, so a size that does
    /// not fit it is reported here.
    pub fn resolve(&self, default_model: Option<&str>) -> Result<Selection> {
        let model = match (&self.model, default_model) {
            (Some(m), _) => m.clone(),
            (None, Some(d)) => d.to_string(),
            (None, None) => {
                return Err(CliError::Usage(
                    "--model is required: a zoo model (see `memopt models`) or a JSON model file".into(),
                ));
            }
        };
        let batch = self.batch.unwrap_or(DEFAULT_BATCH);
        if batch == 0 {
            return Err(CliError::Usage("--batch must be at least 1".into()));
        }
        let custom = if let Some(json) = shipped_model(&model) {
            Some(Arc::new(CustomModel::from_json(json)?))
        } else if looks_like_file(&model) || (zoo::entry(&model).is_err() && Path::new(&model).exists()) {
            let path = Path::new(&model);
            let text = read_input(path, "model file").map_err(|e| match e {
                CliError::Invalid(m) if !path.exists() => CliError::Invalid(format!(
                    "{m} (a --model ending in .json or containing / is read as a file)"
                )),
                other => other,
            })?;
            let parsed = CustomModel::from_json(&text)
                .map_err(|e| CliError::Invalid(format!("model file {}: {e}", path.display())))?;
            Some(Arc::new(parsed))
        } else {
            None
        };
        let base = match &custom {
            Some(c) => c.spec().clone(),
            None => {
                let entry = zoo::entry(&model).map_err(|_| {
                    let names: Vec<&str> = zoo::entries().iter().map(|e| e.name).collect();
                    CliError::Invalid(format!(
                        "unknown model '{model}': the zoo has {}; or give a JSON model file (see `memopt models --help`)",
                        names.join(", ")
                    ))
                })?;
                if self.published {
                    entry.published
                } else {
                    entry.small
                }
            }
        };
        let spec = InputSpec {
            time_steps: self.timesteps.unwrap_or(base.time_steps),
            sample: match &self.input {
                Some(s) => parse_sample(s)?,
                None => base.sample,
            },
            classes: self.classes.unwrap_or(base.classes),
        };
        if spec.time_steps == 0 || spec.classes == 0 {
            return Err(CliError::Usage(
                "--timesteps and --classes must be at least 1".into(),
            ));
        }
        let mut workload = match custom {
            Some(c) => {
                let name = c.name().to_string();
                let s = spec.clone();
                Workload::custom(&name, move |device, seed| c.build(&s, device, seed), batch)
            }
            None => Workload::zoo(&model, spec.clone(), batch),
        };
        workload.optimizer = match self.optimizer.unwrap_or(OptimizerName::Sgd) {
            OptimizerName::Sgd => OptimizerChoice::sgd_momentum(),
            OptimizerName::Adam => OptimizerChoice::adam(),
        };
        workload.seed = self.seed;
        workload.data_seed = self.seed;
        // Build on Meta (no data, a scratch tracker) to report a misfitting size now.
        let params = {
            let _scratch = MemoryTracker::install(MemoryTracker::new(Device::META));
            workload.build_model(Device::META)?.param_count()
        };
        Ok(Selection {
            workload,
            spec,
            params,
        })
    }
}
