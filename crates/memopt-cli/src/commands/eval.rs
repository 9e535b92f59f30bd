//! `memopt eval`: loss and accuracy of saved weights on a dataset, optionally the logits.

use super::dataset::{DataArgs, SplitArg};
use crate::device_arg::parse_device;
use crate::error::{CliError, Result};
use crate::files::{Outputs, check_outside_data};
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use memopt_core::MemoryTracker;
use memopt_core::output_file::same_file;
use memopt_data::npy::{NpyArray, NpyData};
use memopt_data::training::evaluate;
use memopt_data::weights::load_model;
use std::io::Write;
use std::path::PathBuf;

/// Long help of `memopt eval`.
pub const LONG_ABOUT: &str = "\
Evaluate weights (safetensors with PyTorch state_dict names: from `memopt train --save` or
exported from SpikingJelly) on a dataset: BatchNorm on its running statistics, dropout off, loss
(cross-entropy of the time-averaged output) and accuracy. --logits writes the time-averaged
outputs [samples, classes] with the labels and sample indices to an .npz file.";

/// Options of `memopt eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// The dataset.
    #[command(flatten)]
    pub data: DataArgs,
    /// The weights to evaluate.
    #[arg(long, value_name = "FILE")]
    pub load: PathBuf,
    /// Which samples: the test part of the split, the training part, or all.
    #[arg(long, value_enum, default_value_t = SplitArg::Test)]
    pub split: SplitArg,
    /// Write the logits (time-averaged outputs), labels and sample indices to this .npz.
    #[arg(long, value_name = "FILE.npz")]
    pub logits: Option<PathBuf>,
    /// The memory limit the data path keeps to.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
    /// Where to evaluate: cpu, or cuda or cuda:N (a GPU).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda[:N]")]
    pub device: String,
}

/// Evaluates.
pub fn run(args: &EvalArgs, out: &mut dyn Write) -> Result<()> {
    let sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    let mut outputs = Outputs::new(&[("--logits", args.logits.as_deref())])?;
    check_outside_data(&[("--logits", args.logits.as_deref())], args.data.folder("eval")?)?;
    if let Some(p) = &args.logits
        && same_file(p, &args.load)
    {
        return Err(CliError::Usage(format!(
            "--logits {} would replace the weights --load reads; give the logits their own file",
            p.display()
        )));
    }
    let device = parse_device(&args.device)?;
    if device.is_meta() {
        return Err(CliError::Usage(format!(
            "--device {device}: evaluation reads values, and {device} has none; use cpu or cuda[:N]"
        )));
    }
    let _installed = MemoryTracker::install(MemoryTracker::new(device));
    let model = sel.workload.build_model(device)?;
    load_model(&args.load, &model)?;
    let budget = args.limit.data_budget()?;
    let data = args
        .data
        .open("eval", model.spec(), sel.workload.batch_size, &budget)?;
    let (train, test) = args.data.split(&data)?;
    let indices = match args.split {
        SplitArg::Train => train,
        SplitArg::Test => test,
        SplitArg::All => (0..data.len()).collect(),
    };
    if indices.is_empty() {
        return Err(CliError::Invalid(
            "no samples in the chosen --split (see --train-ratio)".into(),
        ));
    }
    let (metrics, logits) = evaluate(&model, &data, &indices, sel.workload.batch_size)?;
    out!(out, "{}", sel.describe())?;
    out!(
        out,
        "{} on {} samples of {}: loss {:.4}, accuracy {:.2}%",
        args.load.display(),
        metrics.samples,
        args.data.folder("eval")?.display(),
        metrics.loss,
        100.0 * metrics.accuracy
    )?;
    if let Some(p) = &args.logits {
        let classes = model.spec().classes;
        let arrays = [
            NpyArray {
                shape: vec![indices.len(), classes],
                data: NpyData::F32(logits),
            },
            NpyArray {
                shape: vec![indices.len()],
                data: NpyData::Int(indices.iter().map(|&i| data.samples[i].1 as i64).collect()),
            },
            NpyArray {
                shape: vec![indices.len()],
                data: NpyData::Int(indices.iter().map(|&i| i as i64).collect()),
            },
        ];
        let bytes = memopt_data::npz::to_bytes(&[
            ("logits", &arrays[0]),
            ("labels", &arrays[1]),
            ("indices", &arrays[2]),
        ])
        .map_err(|e| CliError::Invalid(format!("{}: writing the archive failed: {e}", p.display())))?;
        outputs.stage(p, bytes);
        outputs.commit()?;
        out!(out, "logits written to {}", p.display())?;
    }
    Ok(())
}
