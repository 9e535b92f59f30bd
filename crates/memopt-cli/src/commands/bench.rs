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
--device cuda[:N]; a plan whose steps run out of GPU memory, or a budget no plan meets, is
rejected and its row says why): the exact peak, the measured peak, the median step time and
its range over --steps rounds (default 10), the measured and predicted overhead over the
baseline side by side with their gap, the planning time and whether the step's values (loss,
gradients, running statistics, neuron states, updated parameters) are bit-identical to the
baseline's (same). Each plan's first step runs on a fresh model (peak and values; it keeps no
final neuron state, like `memopt train`, and the states compared come from one more step of a
fresh model that keeps them); then every
round runs one step of each plan in turn on one model, and a row's overhead is the median
over rounds of its step over the baseline's step of the same round, so a change in the
machine's load reaches every row alike; `middle half` gives the quartiles of a row's per-round
overheads (the machine's noise). The summary names the row with the largest gap, and whether
its prediction lies within that middle half.
With --calibration FILE (made by `memopt calibrate` on this device) the strategies plan with
the calibrated cost model, and each row also shows the uncalibrated prediction of the same
plan (column `uncalib.`): before and after, on the same plans and measurements.
The budget row asks for the midpoint between the least reachable peak and the baseline unless
--budget is given. --plan FILE adds a row for a plan made elsewhere (another size, say).
The strategies plan as `memopt optimize` does: each parameter updated in backward as soon as
its gradient is final (--no-update-in-backward: after backward, as the baseline), and, on a
GPU, offloading to host memory where it pays (--no-offload: never).";

/// Options of `memopt bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed rounds: each runs one step of every strategy's plan in turn (after one step of
    /// each on a fresh model for the peak and values, and one warm-up round).
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
    /// Also bench this plan (from `memopt optimize --out`; repeatable): a row `plan file` after
    /// the strategies'. A plan made for another size still runs here (plans name module
    /// paths), with a warning; its peak and overheads are this size's.
    #[arg(long = "plan", value_name = "FILE")]
    pub plans: Vec<std::path::PathBuf>,
    /// What the strategies may choose (offloading, the update in backward).
    #[command(flatten)]
    pub options: crate::option_space::OptionSpaceArgs,
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
    let calibration = args.calibration.load(device)?;
    let plans = args
        .plans
        .iter()
        .map(|p| Ok((p.display().to_string(), super::read_plan_for(p, &sel)?)))
        .collect::<Result<Vec<_>>>()?;
    let report = bench(
        &sel,
        args.steps,
        budget,
        device,
        calibration.as_ref(),
        &plans,
        args.options.space(),
    )?;
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
    let calibrated = report.largest_gap_uncalibrated.is_some();
    out!(out, "{}", sel.describe())?;
    out!(out, "{}", report.cost_model.describe())?;
    out!(
        out,
        "baseline peak {}; planning session setup {:.1} ms; step times: median and range (fastest-slowest) of {} rounds of {on} steps, every plan in turn\n",
        bytes(report.rows[0].peak_bytes),
        report.session_setup_ms,
        report.timed_steps.max(1)
    )?;
    let uncalib = |v: String| {
        if calibrated {
            format!(" {v:>9}")
        } else {
            String::new()
        }
    };
    out!(
        out,
        "{:<13} {:<28} {:>11} {:>7} {:>10} {:>17} {:>9} {:>15} {:>9} {:>7}{} {:>9} {:>7} {:>6}",
        "strategy",
        "setting",
        "peak",
        "reduct.",
        "step ms",
        "range ms",
        "overhead",
        "middle half",
        "predicted",
        "gap",
        uncalib("uncalib.".into()),
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
                if r.peak_bytes > 0 {
                    bytes(r.peak_bytes)
                } else {
                    "-".into()
                }
            )?;
            continue;
        }
        out!(
            out,
            "{:<13} {:<28} {:>11} {:>6.2}x {:>10} {:>17} {:>+8.1}% {:>15} {:>+8.1}% {:>+7.1}{} {:>9.2} {:>7} {:>6}",
            r.strategy,
            r.setting,
            bytes(r.peak_bytes),
            base as f64 / r.peak_bytes.max(1) as f64,
            ms(r.step_ms),
            format!("{}-{}", ms(r.step_ms_min), ms(r.step_ms_max)),
            r.overhead * 100.0,
            format!(
                "{:+.1}..{:+.1}%",
                r.overhead_quartiles.0 * 100.0,
                r.overhead_quartiles.1 * 100.0
            ),
            r.predicted_overhead * 100.0,
            (r.predicted_overhead - r.overhead) * 100.0,
            uncalib(format!(
                "{:+.1}%",
                r.predicted_overhead_uncalibrated.unwrap_or(0.0) * 100.0
            )),
            r.planning_ms,
            r.entries,
            if r.bit_identical { "same" } else { "DIFFER" }
        )?;
    }
    out!(
        out,
        "(middle half: the quartiles of the per-round overheads, the machine's noise; gap: predicted less measured overhead, in points)"
    )?;
    if let Some(g) = &report.largest_gap {
        out!(
            out,
            "\nlargest gap between predicted and measured overhead{}: {}",
            if calibrated { " (calibrated)" } else { "" },
            g.describe()
        )?;
    }
    if let Some(g) = &report.largest_gap_uncalibrated {
        out!(
            out,
            "largest gap, uncalibrated predictions of the same plans: {}",
            g.describe()
        )?;
    }
    let mismatched: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| r.rejected.is_none() && r.measured_peak_bytes != r.peak_bytes)
        .map(|r| r.strategy.as_str())
        .collect();
    if mismatched.is_empty() {
        out!(out, "every measured {on} peak equals its exact (Meta) peak")
    } else {
        out!(
            out,
            "measured {on} peaks differ from the exact peak for: {}",
            mismatched.join(", ")
        )
    }
}
