//! `memopt train`: training steps on synthetic data with a progress line and the measured peak.

use super::read_plan_for;
use crate::error::{CliError, Result};
use crate::format::bytes;
use crate::out;
use crate::progress::{Progress, StepStatus};
use crate::selection::{DEFAULT_MODEL, ModelArgs, parse_device};
use memopt_checkpoint::{Plan, StepOptions};
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
`memopt optimize` computed.";

/// Options of `memopt train`.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// Train under this plan (from `memopt optimize --out`) [default: store everything].
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Training steps.
    #[arg(long, default_value_t = 20, value_name = "S")]
    pub steps: usize,
    /// Where to train: cpu, meta (memory only: no data, no loss) or cuda[:N]. The training
    /// kernels run on the CPU only so far: cuda reports that it is not implemented (or that no
    /// GPU is present).
    #[arg(long, default_value = "cpu", value_name = "cpu|meta|cuda")]
    pub device: String,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print JSON (peak_bytes, step times, losses) instead of text.
    #[arg(long)]
    pub json: bool,
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
    /// Median step time, in ms.
    pub median_step_ms: f64,
    /// Loss of each step (empty on Meta).
    pub losses: Vec<f32>,
}

/// Trains.
pub fn run(args: &TrainArgs, out: &mut dyn Write) -> Result<()> {
    let device = parse_device(&args.device)?;
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    let sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    let plan = match &args.plan {
        Some(p) => read_plan_for(p, &sel)?,
        None => Plan::store_all(),
    };
    let workload = &sel.workload;
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let session = workload.instantiate(device, &plan)?;
    let (model, mut trainer, batch) = session.into_parts();
    if !args.json {
        out!(out, "{}", sel.describe())?;
        out!(
            out,
            "training {} steps on {device}, {}",
            args.steps,
            if plan.entries.is_empty() {
                "storing everything".to_string()
            } else {
                format!("under a plan of {} entries", plan.entries.len())
            }
        )?;
        out.flush().map_err(CliError::Output)?;
    }
    let mut progress = Progress::new(args.steps, !args.quiet && !args.json);
    let mut losses = Vec::new();
    let mut times = Vec::new();
    let started = Instant::now();
    for step in 0..args.steps {
        let t = Instant::now();
        let o = trainer.step(&model, &batch, StepOptions::default())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        losses.extend(o.loss);
        progress.update(&StepStatus {
            done: step + 1,
            loss: o.loss,
            current_bytes: tracker.current_bytes(),
            peak_bytes: tracker.peak_bytes(),
        });
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak = tracker.peak_bytes();
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
            median_step_ms: median(&times),
            losses,
        };
        return out!(out, "{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    }
    out!(
        out,
        "done: {} steps in {:.2} s ({:.2} steps/s, median step {:.2} ms)",
        args.steps,
        elapsed,
        args.steps as f64 / elapsed.max(1e-9),
        median(&times)
    )?;
    match (losses.first(), losses.last()) {
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
    )
}
