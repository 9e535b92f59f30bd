//! `memopt bench`: every strategy side by side for one model.

use crate::bench::{bench, ms};
use crate::calibration::CalibrationArgs;
use crate::device_arg::{DEVICE_VALUES, parse_device};
use crate::error::{CliError, Result};
use crate::format::bytes;
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use memopt_search::{Budget, SearchError};
use std::io::Write;

/// Long help of `memopt bench`.
pub const LONG_ABOUT: &str = "\
Plan one model with every strategy (pipeline level 4, memonger, budget, max-overhead 20%,
min-memory) and measure each plan with real steps on --device (the CPU, or a GPU with
--device cuda[:N]; a plan whose steps run out of GPU memory is rejected and its row says why): the exact peak, the measured peak, the
median step time and its range over --steps timed steps (default 10), the measured and
predicted overhead over the baseline, the planning time and whether the step's values (loss,
gradients, running statistics, neuron states, updated parameters) are bit-identical to the
baseline's (same). Overheads within the range of the baseline's own step times are noise.
The budget row asks for the midpoint between the least reachable peak and the baseline unless
--budget is given.";

/// Options of `memopt bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed steps per strategy (after one step for the peak and gradients).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = crate::selection::whole, allow_hyphen_values = true)]
    pub steps: usize,
    /// Budget of the budget row (2GiB, 512MiB, 40%) [default: midway between the least
    /// reachable peak and the baseline].
    #[arg(long, value_name = "BYTES|PCT", allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// Print JSON: model, batch, timesteps and rows of {strategy, peak_bytes, step_ms,
    /// overhead, planning_ms, ...}.
    #[arg(long)]
    pub json: bool,
    /// Where the steps run: cpu, or cuda or cuda:N (a GPU: plans for its allocation rules, times
    /// from CUDA events).
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
    /// The memory limit checked before the steps (against the baseline, the largest).
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
    /// The cost model's calibration (the predicted column).
    #[command(flatten)]
    pub calibration: CalibrationArgs,
}

/// Benches.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    let budget: Option<Budget> = args
        .budget
        .as_deref()
        .map(|b| {
            b.parse()
                .map_err(|e: SearchError| CliError::Usage(e.to_string().replace("invalid setting: ", "")))
        })
        .transpose()?;
    let device = parse_device(&args.device)?;
    if device.is_meta() {
        return Err(CliError::Usage(
            "bench measures real steps: use --device cpu or cuda[:N] (memopt optimize plans on meta)".into(),
        ));
    }
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    sel.workload.target = device.target();
    args.limit.check(
        &sel.workload,
        &[&memopt_checkpoint::Plan::store_all()],
        device,
        &args.model.command_line(),
    )?;
    let report = bench(&sel, args.steps, budget, device, &args.calibration)?;
    // How the device is named in the text: "CPU" as before, else `cuda:N`.
    let on = match device {
        memopt_core::Device::Cpu => "CPU".to_string(),
        d => d.to_string(),
    };
    if args.json {
        return out!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    out!(out, "{}", sel.describe())?;
    out!(
        out,
        "baseline peak {}; planning session setup {:.1} ms; step times: median and range (fastest-slowest) of {} {on} steps\n",
        bytes(report.rows[0].peak_bytes),
        report.session_setup_ms,
        report.timed_steps.max(1)
    )?;
    out!(
        out,
        "{:<13} {:<28} {:>11} {:>7} {:>10} {:>17} {:>9} {:>9} {:>9} {:>7} {:>6}",
        "strategy",
        "setting",
        "peak",
        "reduct.",
        "step ms",
        "range ms",
        "overhead",
        "predicted",
        "plan ms",
        "entries",
        "values"
    )?;
    let base = report.rows[0].peak_bytes.max(1);
    for r in &report.rows {
        if let Some(why) = &r.rejected {
            out!(
                out,
                "{:<13} {:<28} {:>11} rejected: {why}",
                r.strategy,
                r.setting,
                bytes(r.peak_bytes)
            )?;
            continue;
        }
        out!(
            out,
            "{:<13} {:<28} {:>11} {:>6.2}x {:>10} {:>17} {:>+8.1}% {:>+8.1}% {:>9.2} {:>7} {:>6}",
            r.strategy,
            r.setting,
            bytes(r.peak_bytes),
            base as f64 / r.peak_bytes.max(1) as f64,
            ms(r.step_ms),
            format!("{}-{}", ms(r.step_ms_min), ms(r.step_ms_max)),
            r.overhead * 100.0,
            r.predicted_overhead * 100.0,
            r.planning_ms,
            r.entries,
            if r.bit_identical { "same" } else { "DIFFER" }
        )?;
    }
    let mismatched: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| r.rejected.is_none() && r.measured_peak_bytes != r.peak_bytes)
        .map(|r| r.strategy.as_str())
        .collect();
    if mismatched.is_empty() {
        out!(out, "\nevery measured {on} peak equals its exact (Meta) peak")
    } else {
        out!(
            out,
            "\nmeasured {on} peaks differ from the exact peak for: {}",
            mismatched.join(", ")
        )
    }
}
