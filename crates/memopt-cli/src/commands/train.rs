//! `memopt train`: training steps on synthetic data with a progress line and the measured peak.

use super::read_plan_for;
use crate::device_arg::{DEVICE_VALUES, parse_device};
use crate::error::{CliError, Result};
use crate::format::bytes;
use crate::gpu_memory::GpuMemory;
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::progress::{Progress, StepStatus};
use crate::samples::StepSamples;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use memopt_checkpoint::Plan;
use memopt_core::MemoryTracker;
use memopt_profiler::timing::median;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Long help of `memopt train`.
pub const LONG_ABOUT: &str = "\
Train the model on synthetic data (one fixed batch of spike inputs with probability 0.3 and
labels, so the loss falls as it is learnt) with SGD momentum or Adam, storing everything or under a
plan from `memopt optimize --out`. A progress line on stderr shows steps/s, the loss and the
memory held now and at most; the report gives the measured peak, which for a plan is the peak
`memopt optimize` computed.

With --data it trains on a dataset for --epochs, on cpu or cuda[:N]. Before the first step it
replays the whole run on Meta (the batches on the device, the smaller last batch, the
evaluation) and prints the run's exact peaks; --device meta or meta:cuda prints only those.";

/// Options of `memopt train`.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// The memory limit checked before the first step.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
    /// Train under this plan (from `memopt optimize --out`) [default: store everything].
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Training steps.
    #[arg(long, default_value_t = 20, value_name = "S", value_parser = crate::selection::whole, allow_hyphen_values = true)]
    pub steps: usize,
    /// Where to train: cpu, cuda or cuda:N (a GPU), meta or meta:cuda (memory only: no values,
    /// no loss; with --data the run's predicted peaks).
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print JSON (peak_bytes, step times, losses) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Training on a dataset (--data) for epochs, with weights saved and loaded.
    #[command(flatten)]
    pub dataset: super::train_data::DataTrainArgs,
}

/// The JSON of `memopt train --json`.
#[derive(Debug, Clone, Serialize)]
pub struct TrainJson {
    /// Model name.
    pub model: String,
    /// Batch size N.
    pub batch: usize,
    /// Time steps T.
    pub timesteps: usize,
    /// `cpu`, `meta` or `cuda:N`.
    pub device: String,
    /// Steps run.
    pub steps: usize,
    /// Entries of the plan (0: store everything).
    pub plan_entries: usize,
    /// Most bytes held at once, model, optimizer state and batch included (for a plan: the
    /// planned peak `memopt optimize` reports).
    pub peak_bytes: u64,
    /// Most bytes of the caching allocator's blocks held at once (each tensor rounded up).
    pub allocated_peak_bytes: u64,
    /// Most bytes of segments the caching allocator held from the device at once: what runs
    /// out on a device. The cache is kept between steps, as PyTorch does.
    pub reserved_peak_bytes: u64,
    /// Bytes held after the last step.
    pub final_bytes: u64,
    /// Median step time of the sampled steps (every `sample_every`-th), in ms.
    pub median_step_ms: f64,
    /// Loss of the first step (`None` on Meta).
    pub first_loss: Option<f32>,
    /// Loss of the last step (`None` on Meta).
    pub last_loss: Option<f32>,
    /// Steps between two sampled steps of `losses` and the step times: 1 up to 1000 steps, so
    /// that a run of any length keeps at most 1000 samples.
    pub sample_every: usize,
    /// Loss of every `sample_every`-th step, the first included (empty on Meta).
    pub losses: Vec<f32>,
    /// Time of every `sample_every`-th step, the first (warm-up) included, in ms.
    pub step_ms: Vec<f64>,
    /// The vector path of the CPU kernels: `portable`, `avx2` or `avx512` (the widest the CPU
    /// has, capped by `MEMOPT_CPU_ISA`).
    pub cpu_path: &'static str,
    /// On a GPU: its memory after the steps, memopt's pool and what lies outside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuMemory>,
}

/// Trains.
pub fn run(args: &TrainArgs, out: &mut dyn Write) -> Result<()> {
    let device = parse_device(&args.device)?;
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    // Plans and the memory check follow the device's allocation rules (CUDA's on a GPU).
    sel.workload.target = device.target();
    let plan = match &args.plan {
        Some(p) => read_plan_for(p, &sel)?,
        None => Plan::store_all(),
    };
    args.limit
        .check(&sel.workload, &[&plan], device, &args.model.command_line())?;
    if args.dataset.data.data.is_some() {
        let step_peak = crate::memory_limit::reserved_peak(&sel.workload, &[&plan])?;
        let run = super::train_data::DataRun {
            args: &args.dataset,
            limit: &args.limit,
            step_peak,
            quiet: args.quiet || args.json,
        };
        return super::train_data::run(&sel, &plan, device, &run, out);
    }
    args.dataset.reject_without_data()?;
    let workload = &sel.workload;
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let session = workload.instantiate(device, &plan)?;
    let (model, mut trainer, batch) = session.into_parts();
    if !args.json {
        out!(out, "{}", sel.describe())?;
        out!(
            out,
            "training {} on {device}, {}",
            crate::format::count(args.steps, "step", "steps"),
            match (plan.entries.len(), plan.update_in_backward) {
                (0, false) => "storing everything".to_string(),
                (0, true) => "storing everything, updating each parameter in backward".to_string(),
                (n, in_backward) => format!(
                    "under a plan of {}{}",
                    crate::format::count(n, "entry", "entries"),
                    if in_backward {
                        ", updating each parameter in backward"
                    } else {
                        ""
                    }
                ),
            }
        )?;
        out.flush().map_err(CliError::Output)?;
    }
    let mut progress = Progress::new(args.steps, !args.quiet && !args.json);
    // Bounded: nothing held here grows with the number of steps.
    let mut losses = StepSamples::new(args.steps);
    let mut times = StepSamples::new(args.steps);
    let (mut first_loss, mut last_loss) = (None, None);
    let started = Instant::now();
    for step in 0..args.steps {
        let t = Instant::now();
        // The options plans are made for, so that the peak is the planned one.
        let o = trainer.step(&model, &batch, memopt_profiler::PLANNED_STEP)?;
        times.offer(step, t.elapsed().as_secs_f64() * 1e3);
        if let Some(l) = o.loss {
            losses.offer(step, l);
            first_loss = first_loss.or(Some(l));
            last_loss = Some(l);
        }
        progress.update(&StepStatus {
            done: step + 1,
            loss: o.loss,
            current_bytes: tracker.current_bytes(),
            peak_bytes: tracker.peak_bytes(),
        });
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak = tracker.peak_bytes();
    let gpu = GpuMemory::measure(device, &tracker)?;
    if args.json {
        let json = TrainJson {
            model: sel.name().to_string(),
            batch: workload.batch_size,
            timesteps: sel.spec.time_steps,
            device: device.to_string(),
            steps: args.steps,
            plan_entries: plan.entries.len(),
            peak_bytes: peak,
            allocated_peak_bytes: tracker.allocated_peak_bytes(),
            reserved_peak_bytes: tracker.reserved_peak_bytes(),
            final_bytes: tracker.current_bytes(),
            median_step_ms: median(times.values()),
            first_loss,
            last_loss,
            sample_every: losses.every(),
            losses: losses.into_values(),
            step_ms: times.into_values(),
            cpu_path: memopt_core::CpuIsa::selected().name(),
            gpu,
        };
        return out!(out, "{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    }
    out!(
        out,
        "done: {} in {:.2} s ({:.2} steps/s, median step {:.2} ms)",
        crate::format::count(args.steps, "step", "steps"),
        elapsed,
        args.steps as f64 / elapsed.max(1e-9),
        median(times.values())
    )?;
    match (first_loss, last_loss) {
        (Some(a), Some(b)) => out!(out, "loss: {a:.4} -> {b:.4}")?,
        _ => out!(out, "loss: n/a on {device} (no data)")?,
    }
    out!(
        out,
        "measured peak: {} ({peak} bytes; model, optimizer state and batch included)",
        bytes(peak)
    )?;
    out!(
        out,
        "caching allocator peaks: allocated {}, reserved {} (segments held from the device)",
        bytes(tracker.allocated_peak_bytes()),
        bytes(tracker.reserved_peak_bytes())
    )?;
    match gpu {
        Some(g) => out!(out, "{}", g.line()),
        None => Ok(()),
    }
}
