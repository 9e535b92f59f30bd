//! `memopt train --data`: epochs on an event-camera dataset, with a learning-rate schedule, a
//! progress bar, metrics per epoch (CSV or JSON lines), a loss/accuracy chart, and weights
//! saved, loaded and resumed in safetensors under PyTorch's `state_dict()` names.

use super::dataset::DataArgs;
use super::run_memory::{Epochs, peaks_line, refuse_unless_run_fits, replay_on_meta, replayed_text};
use super::train_chart;
use crate::error::{CliError, Result};
use crate::files::{Outputs, check_outside_data, write_atomic};
use crate::format::bytes;
use crate::gpu_memory::GpuMemory;
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::selection::Selection;
use memopt_checkpoint::optim::{Adam, Optimizer, Sgd};
use memopt_checkpoint::{Model, Plan, Trainer};
use memopt_core::output_file::same_file;
use memopt_core::{Device, MemoryTracker};
use memopt_data::training::{EpochMetrics, EpochPlan, Schedule};
use memopt_data::weights::{WeightsInfo, load_model, load_training, save_pair, state_path};
use memopt_profiler::{AllocatorLevels, OptimizerChoice};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The learning-rate schedule of `--schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// The same rate every epoch.
    Constant,
    /// Cosine annealing to 0 over the run's epochs (CosineAnnealingLR, T_max = --epochs).
    Cosine,
    /// Multiply by --gamma every --step-size epochs (StepLR).
    Step,
}

/// Options of `memopt train` for training on a dataset (with `--data`).
#[derive(Debug, Clone, clap::Args)]
pub struct DataTrainArgs {
    /// The dataset.
    #[command(flatten)]
    pub data: DataArgs,
    /// Epochs to train (with --data).
    #[arg(long, default_value_t = 1, value_name = "E")]
    pub epochs: u64,
    /// Learning rate (with --data) [default: 0.1 for sgd, 0.001 for adam].
    #[arg(long, value_name = "LR", value_parser = learning_rate, allow_hyphen_values = true)]
    pub lr: Option<f32>,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9, value_name = "M", value_parser = non_negative, allow_hyphen_values = true)]
    pub momentum: f32,
    /// L2 weight decay.
    #[arg(long, default_value_t = 0.0, value_name = "WD", value_parser = non_negative, allow_hyphen_values = true)]
    pub weight_decay: f32,
    /// Learning-rate schedule over the epochs.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Cosine)]
    pub schedule: ScheduleArg,
    /// Epochs between decays of --schedule step.
    #[arg(long, default_value_t = 30, value_name = "E")]
    pub step_size: u64,
    /// Decay factor of --schedule step.
    #[arg(long, default_value_t = 0.1, value_name = "G")]
    pub gamma: f64,
    /// Start from these weights (safetensors with state_dict names, e.g. from SpikingJelly).
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub load: Option<PathBuf>,
    /// Save the weights after every epoch to FILE (loadable by SpikingJelly with strict=True)
    /// and the training state (optimizer, counters) to FILE with `.state.safetensors`.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Continue a run from its `.state.safetensors` file (same model, optimizer and data).
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// Write loss and accuracy per epoch: CSV, or JSON lines when FILE ends in .jsonl.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Draw loss and accuracy per epoch as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<PathBuf>,
}

impl DataTrainArgs {
    /// Options that only make sense with --data are a usage error without it.
    pub fn reject_without_data(&self) -> Result<()> {
        if self.lr.is_some() {
            return Err(CliError::Usage(
                "--lr works with training on a dataset: add --data DIR (synthetic runs use the optimizer's default rate)"
                    .into(),
            ));
        }
        match self.value_option() {
            Some(flag) => Err(CliError::Usage(format!(
                "{flag} works with training on a dataset: add --data DIR (synthetic runs keep no weights)"
            ))),
            None => Ok(()),
        }
    }

    /// The first option given that reads or writes values (weights, state, metrics, charts).
    fn value_option(&self) -> Option<&'static str> {
        [
            ("--load", self.load.is_some()),
            ("--save", self.save.is_some()),
            ("--resume", self.resume.is_some()),
            ("--metrics", self.metrics.is_some()),
            ("--chart", self.chart.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, set)| set.then_some(flag))
    }
}

/// Parses `--lr`: a finite learning rate >= 0.
fn learning_rate(s: &str) -> std::result::Result<f32, String> {
    non_negative(s)
        .map_err(|_| format!("the learning rate must be a finite number >= 0 (e.g. 0.1), got '{s}'"))
}

/// Parses `--momentum` and `--weight-decay`: a finite number >= 0.
fn non_negative(s: &str) -> std::result::Result<f32, String> {
    s.trim()
        .parse::<f32>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("must be a finite number >= 0 (e.g. 0.9), got '{s}'"))
}

/// The option name of the training-state file `--save` writes beside the weights.
const STATE_FLAG: &str = "--save's training state";

/// Checks every output of the run before any work: each can be written, no two name one file
/// (through links too), and none replaces an input, except that the saved weights and state
/// may replace the weights or state the run started from (read whole at the start).
fn check_outputs(a: &DataTrainArgs) -> Result<()> {
    let state = a.save.as_deref().map(state_path);
    let outputs = [
        ("--save", a.save.as_deref()),
        (STATE_FLAG, state.as_deref()),
        ("--metrics", a.metrics.as_deref()),
        ("--chart", a.chart.as_deref()),
    ];
    Outputs::new(&outputs)?;
    check_outside_data(&outputs, a.data.folder("train")?)?;
    let inputs = [("--load", a.load.as_deref()), ("--resume", a.resume.as_deref())];
    let replaces_what_it_continues = |out: &str, input: &str| {
        matches!(
            (out, input),
            ("--save" | STATE_FLAG, "--load") | (STATE_FLAG, "--resume")
        )
    };
    for (out_flag, out) in outputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p))) {
        for (in_flag, input) in inputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p))) {
            if same_file(out, input) && !replaces_what_it_continues(out_flag, in_flag) {
                return Err(CliError::Usage(format!(
                    "{out_flag} {} would replace the file {in_flag} reads; give it its own path",
                    out.display()
                )));
            }
        }
    }
    Ok(())
}

/// The epoch a state file was saved after (its `epoch` entry, written by `--save`).
fn saved_epoch(path: &Path, info: &WeightsInfo) -> Result<u64> {
    let text = info.extra.get("epoch").ok_or_else(|| {
        CliError::Invalid(format!(
            "{}: no 'epoch' entry: the state was not saved by `memopt train --save`, so where its run \
             stopped is unknown",
            path.display()
        ))
    })?;
    text.trim().parse::<u64>().map_err(|_| {
        CliError::Invalid(format!(
            "{}: the 'epoch' entry is '{text}', not a whole number: the file is damaged",
            path.display()
        ))
    })
}

fn optimizer(sel: &Selection, model: &Model, a: &DataTrainArgs) -> Result<Box<dyn Optimizer>> {
    Ok(match sel.workload.optimizer {
        OptimizerChoice::Sgd(mut cfg) => {
            cfg.lr = a.lr.unwrap_or(cfg.lr);
            cfg.momentum = a.momentum;
            cfg.weight_decay = a.weight_decay;
            Box::new(Sgd::new(model, cfg)?)
        }
        OptimizerChoice::Adam(mut cfg) => {
            cfg.lr = a.lr.unwrap_or(cfg.lr);
            cfg.weight_decay = a.weight_decay;
            Box::new(Adam::new(model, cfg)?)
        }
    })
}

fn schedule(a: &DataTrainArgs) -> Result<Schedule> {
    Ok(match a.schedule {
        ScheduleArg::Constant => Schedule::Constant,
        ScheduleArg::Cosine => Schedule::Cosine { t_max: a.epochs },
        ScheduleArg::Step => {
            if a.step_size == 0 || !(a.gamma.is_finite() && a.gamma > 0.0) {
                return Err(CliError::Usage(format!(
                    "--schedule step needs --step-size >= 1 and --gamma > 0, got {} and {}",
                    a.step_size, a.gamma
                )));
            }
            Schedule::Step {
                step_size: a.step_size,
                gamma: a.gamma,
            }
        }
    })
}

/// One metrics record per epoch.
fn metrics_line(m: &EpochMetrics, jsonl: bool) -> String {
    let (tl, ta) = m.test.map_or((f64::NAN, f64::NAN), |t| (t.loss, t.accuracy));
    if jsonl {
        let num = |v: f64| {
            if v.is_finite() {
                serde_json::json!(v)
            } else {
                serde_json::Value::Null
            }
        };
        serde_json::json!({
            "epoch": m.epoch + 1, "lr": m.lr, "train_loss": m.train.loss, "train_acc": m.train.accuracy,
            "test_loss": num(tl), "test_acc": num(ta),
        })
        .to_string()
    } else {
        let cell = |v: f64| {
            if v.is_finite() {
                format!("{v}")
            } else {
                String::new()
            }
        };
        format!(
            "{},{},{},{},{},{}",
            m.epoch + 1,
            m.lr,
            m.train.loss,
            m.train.accuracy,
            cell(tl),
            cell(ta)
        )
    }
}

/// What `memopt train` hands the data run besides the model: its options, the memory limit,
/// the step's exact reserved peak (bytes) and whether to hide progress.
#[derive(Debug, Clone, Copy)]
pub struct DataRun<'a> {
    /// The dataset options.
    pub args: &'a DataTrainArgs,
    /// The memory limit options.
    pub limit: &'a MemoryLimitArgs,
    /// The training step's reserved peak on the device, in bytes (its plan's exact figure).
    pub step_peak: u64,
    /// No progress bar.
    pub quiet: bool,
}

/// The model under `plan` on `device` and its trainer (optimizer from the options).
fn build(sel: &Selection, plan: &Plan, device: Device, a: &DataTrainArgs) -> Result<(Model, Trainer)> {
    let mut model = sel.workload.build_model(device)?;
    model.apply_plan(plan)?;
    let opt = optimizer(sel, &model, a)?;
    Ok((model, Trainer::new(opt, sel.workload.seed)))
}

/// Options that write or read values, which Meta does not have.
fn reject_on_meta(a: &DataTrainArgs, device: Device) -> Result<()> {
    match a.value_option() {
        Some(flag) => Err(CliError::Usage(format!(
            "{flag} needs values, and {device} has none (it predicts the run's memory): train on cpu or \
             cuda to use it"
        ))),
        None => Ok(()),
    }
}

/// Trains on `--data` for `--epochs` on `device` (on Meta: replays the run's allocations and
/// reports its exact peaks); `limit` bounds the data path's memory and the run's.
pub fn run(
    sel: &Selection,
    plan: &Plan,
    device: Device,
    run: &DataRun<'_>,
    out: &mut dyn Write,
) -> Result<()> {
    let DataRun {
        args: a,
        limit,
        step_peak,
        quiet,
    } = *run;
    if a.epochs == 0 {
        return Err(CliError::Usage("--epochs must be at least 1".into()));
    }
    if device.is_meta() {
        reject_on_meta(a, device)?;
    }
    let sched = schedule(a)?;
    check_outputs(a)?;
    // The step's peak is host memory only on the CPU; it already counts the parameters.
    let host_peak = if device == Device::Cpu { step_peak } else { 0 };
    let data_budget = limit.data_budget()?.less(host_peak, "the training step")?;
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let (model, mut trainer) = build(sel, plan, device, a)?;
    let base_lr = trainer.optimizer().learning_rate();
    let mut data = a
        .data
        .open("train", model.spec(), sel.workload.batch_size, &data_budget)?;
    memopt_data::training::check_classes(&model, &data)?;
    let (train, test) = a.data.split(&data)?;
    if train.is_empty() {
        return Err(CliError::Invalid(
            "the training split is empty: raise --train-ratio".into(),
        ));
    }
    let mut start = 0;
    if let Some(p) = &a.load {
        let info = load_model(p, &model)?;
        out!(out, "loaded {} ({} steps behind it)", p.display(), info.steps)?;
    }
    if let Some(p) = &a.resume {
        let info = load_training(p, &model, &mut trainer)?;
        start = saved_epoch(p, &info)?;
        out!(
            out,
            "resumed {} after epoch {start} ({} steps)",
            p.display(),
            trainer.steps()
        )?;
        if start >= a.epochs {
            return Err(CliError::Usage(format!(
                "{} already ran {start} epochs; ask for more with --epochs",
                p.display()
            )));
        }
    }
    out!(out, "{}", sel.describe())?;
    let batch_size = sel.workload.batch_size;
    let last = train.len() % batch_size;
    out!(
        out,
        "data: {} ({} samples, {} classes; {} train, {} test), epochs {}..{} of {}, batch {}{}",
        a.data.folder("train")?.display(),
        data.len(),
        data.classes.len(),
        train.len(),
        test.len(),
        start + 1,
        a.epochs,
        a.epochs,
        batch_size,
        if last > 0 {
            format!(" (the last of each epoch {last}: trained, and replayed in the peak below)")
        } else {
            String::new()
        }
    )?;
    let epoch_plan = EpochPlan {
        base_lr,
        schedule: sched,
        seed: sel.workload.seed,
        batch_size,
    };
    let replay = Epochs {
        data: &data,
        train: &train,
        test: &test,
        plan: epoch_plan,
        range: start..a.epochs,
    };
    let replayed = replay_on_meta(device.target(), &replay, |d| build(sel, plan, d, a))?;
    let how = replayed_text(&replayed, &replay.range);
    if device.is_meta() {
        return out!(
            out,
            "predicted peak of the run on {device}: {} (exact: model, optimizer state, the batches \
             on the device and the evaluation included; a step alone {}; {how})",
            peaks_line(&replayed.peaks),
            bytes(step_peak)
        );
    }
    let replayed = replayed.peaks;
    refuse_unless_run_fits(limit, device, &replayed, step_peak, tracker.reserved_bytes())?;
    if device == Device::Cpu && replayed.reserved_bytes > step_peak {
        // The frames' budget leaves room for the whole run, not only for one step (the
        // replay's loader threads have ended, so the dataset is not shared).
        let more = replayed.reserved_bytes - step_peak;
        if let Some(d) = Arc::get_mut(&mut data) {
            d.budget = d.budget.less(more, "the training run's exact reserved peak")?;
        }
    }
    // The replay's epochs again: `replay` borrowed the dataset whose budget may have changed.
    let epochs = Epochs {
        data: &data,
        train: &train,
        test: &test,
        plan: epoch_plan,
        range: start..a.epochs,
    };
    out!(
        out,
        "planned peak of the run on {device}: {} ({how})",
        peaks_line(&replayed)
    )?;
    let steps_per_epoch = train.len().div_ceil(batch_size) as u64;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new((a.epochs - start) * steps_per_epoch)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps eta {eta} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let jsonl = a
        .metrics
        .as_ref()
        .is_some_and(|p| p.extension().is_some_and(|e| e == "jsonl"));
    let mut metrics_text = if jsonl {
        String::new()
    } else {
        "epoch,lr,train_loss,train_acc,test_loss,test_acc\n".to_string()
    };
    let mut history: Vec<EpochMetrics> = Vec::new();
    let started = Instant::now();
    let mut samples_done = 0usize;
    let on_device = matches!(device, Device::Cuda(_));
    epochs.run(
        &model,
        &mut trainer,
        &mut |epoch, step| {
            samples_done += step.samples;
            bar.inc(1);
            let rate = samples_done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            let memory = if on_device {
                format!(", {} reserved on {device}", bytes(tracker.reserved_bytes()))
            } else {
                String::new()
            };
            let loss = step.loss.map_or("n/a".to_string(), |l| format!("{l:.4}"));
            bar.set_message(format!(
                "epoch {} loss {loss}, {rate:.1} samples/s{memory}",
                epoch + 1
            ));
        },
        &mut |m, trainer| {
            let test_text = m.test.map_or("no test split".to_string(), |t| {
                format!("test loss {:.4} acc {:.1}%", t.loss, 100.0 * t.accuracy)
            });
            bar.suspend(|| {
                out!(
                    out,
                    "epoch {}/{}  lr {:.5}  train loss {:.4} acc {:.1}%  {test_text}",
                    m.epoch + 1,
                    a.epochs,
                    m.lr,
                    m.train.loss,
                    100.0 * m.train.accuracy
                )
            })?;
            metrics_text.push_str(&metrics_line(m, jsonl));
            metrics_text.push('\n');
            history.push(*m);
            if let Some(p) = &a.save {
                let mut info = WeightsInfo {
                    model: model.name().to_string(),
                    steps: trainer.steps(),
                    ..WeightsInfo::default()
                };
                info.extra.insert("epoch".into(), (m.epoch + 1).to_string());
                save_pair(p, &model, trainer, &info)?;
            }
            if let Some(p) = &a.metrics {
                write_atomic(p, metrics_text.as_bytes())?;
            }
            if let Some(p) = &a.chart {
                write_atomic(p, train_chart::render(model.name(), &history).as_bytes())?;
            }
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    if let Some(p) = &a.save {
        out!(out, "saved {} and {}", p.display(), state_path(p).display())?;
    }
    let trained: usize = history.iter().map(|m| m.train.samples).sum();
    let seconds: f64 = history.iter().map(|m| m.train_time.seconds).sum();
    let waiting: f64 = history.iter().map(|m| m.train_time.waiting_seconds).sum();
    out!(
        out,
        "trained {trained} samples in {seconds:.2} s ({:.1} samples/s), waiting for batches {:.1}% of it",
        trained as f64 / seconds.max(1e-9),
        100.0 * waiting / seconds.max(1e-9)
    )?;
    out!(
        out,
        "measured peak of the run on {device}: {}",
        peaks_line(&AllocatorLevels::peaks_of(&tracker))
    )?;
    match GpuMemory::measure(device, &tracker)? {
        Some(g) => out!(out, "{}", g.line()),
        None => Ok(()),
    }
}
