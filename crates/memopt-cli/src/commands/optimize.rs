//! `memopt optimize`: plan, print the plan as a tree, optionally verify it with real steps.

use super::chart;
use crate::calibration::{CalibrationArgs, CostModelSource, planning_session};
use crate::device_arg::{DEVICE_VALUES, parse_device, parse_planning_device};
use crate::error::{CliError, Result};
use crate::files::Outputs;
use crate::format::{bytes, percent};
use crate::memory_limit::MemoryLimitArgs;
use crate::option_space::OptionSpaceArgs;
use crate::out;
use crate::plan_file::{MadeFor, plan_file_json};
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use crate::steps::run_steps;
use crate::strategy::{StrategyArgs, explain};
use crate::tree::plan_tree;
use memopt_checkpoint::Plan;
use memopt_core::Target;
use memopt_profiler::timing::{median, quartiles};
use memopt_profiler::{PlanCheck, Quantity, TimingProfiler, plan_is_data_dependent};
use memopt_search::{AllocatorLevels, BudgetFit, PipelineSummary};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Long help of `memopt optimize`.
pub const LONG_ABOUT: &str = "\
Plan which modules to checkpoint (keep only their input, bit-packed when it is spikes, and
recompute them in backward) so that a training step needs less memory. Every plan's peak is
exact: it is computed by a step on the Meta device, which allocates exactly as the CPU does.
Prints the baseline and planned peaks (requested, allocated and reserved), the predicted
slowdown and the plan as a module tree.

With no options it plans the CIFAR10-DVS VGG (T=4, N=4, 2x48x48) with the default strategy.

Strategies (--strategy, or inferred from the options given):
  max-overhead  the least memory whose predicted slowdown is at most --max-overhead (default 20%).
                The default: it answers \"how small can it get for the time I accept\".
  pipeline      SpikingJelly's memopt pipeline: level 1 wraps blocks, 2 splits them, 3 chunks
                time, 4 unwraps what does not pay (--level, --profile, --prefer, --max-wrapped).
  memonger      Chen et al.'s sqrt-threshold segments (MXNet's memonger).
  budget        the fastest plan whose reserved peak fits --budget (2GiB, 512MiB, 1TiB, 40%):
                the caching allocator's segments, what runs out on a device, checked for each
                candidate with a Meta step. --budget-kind allocated bounds the allocated peak
                instead (the tensors' blocks; memopt's meaning before the caching allocator),
                --budget-kind requested the requested peak (the tensors' bytes: the planned
                peak printed first). An impossible budget is an error stating the smallest
                peak found.
  min-memory    the least peak reachable, whatever the time.

Plans are made for the step `memopt train` runs, which keeps no final neuron state (each is
freed as soon as nothing reads it); `profile --plan`, `train --plan` and `bench` measure that
step.

Planning for a GPU (--device cuda or meta:cuda), the planners also offer every checkpoint
offloaded: its saved input moves to host memory until backward, taking no GPU memory in
between, at the cost of copying it out and back (priced at the host link speed `memopt
calibrate --device cuda` measures; uncalibrated at 1/200 of the memory bandwidth guess). Kept
chunk-boundary states go to host memory too, and the report shows the host memory the plan
holds at its peak. On the CPU, whose memory is the host's, offloading frees nothing and is not
offered.

Plans update in backward: the optimizer updates each parameter as soon as no op still to run in
backward reads it, and its gradient is freed there, so no backward holds the gradients of the
layers after it (bit-identical parameters, no extra time; the plan file says
\"update_in_backward\": true). The baseline updates after backward, as training without memopt
does. --no-update-in-backward plans with the update after backward.

A segment run in time chunks computes its BatchNorm statistics in a pass over its chunks; the
planners may have it keep that pass's BatchNorm inputs for the pass that gives its outputs
(\"batch_norm_inputs\": \"kept\", shown as \"BatchNorm inputs kept\"), so the layers before
the BatchNorm run once in forward instead of twice, at the price of holding those inputs
between the passes.

--verify runs a real CPU step of a fresh model with and without the plan (same seeds) and
checks that the measured peak is the planned one and that the loss, every gradient, the
BatchNorm running statistics and the updated parameters are bit-identical; the neuron states,
which that step does not keep, are compared bit for bit from one more step of a fresh model
that keeps them (the library's memopt_profiler::verify).";

/// Options of `memopt optimize`.
#[derive(Debug, Clone, clap::Args)]
pub struct OptimizeArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// The strategy and its settings.
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// Write the plan as JSON to FILE (read back by `memopt train --plan` and `profile --plan`),
    /// with the model, sizes and memopt version it was made for (others get a warning).
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Run real steps with and without the plan: measured peak, step times, and whether the
    /// gradients are bit-identical.
    #[arg(long)]
    pub verify: bool,
    /// The device to plan for: cpu, or cuda or cuda:N to plan for a GPU (the Meta device then
    /// allocates as the CUDA backend will; no GPU is needed). Also the device of the --verify
    /// steps, which need that device to exist.
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
    /// Timed rounds of --verify, each a baseline step and a planned step in turn on one model
    /// (after each plan's first step on a fresh model, which gives the peak and values).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::selection::whole, allow_hyphen_values = true)]
    pub steps: usize,
    /// Print JSON (stable field names) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG chart (baseline and planned timelines, top modules) to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// The memory limit checked before the --verify steps.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
    /// The cost model's calibration (the predicted overhead, and the plan where the strategy
    /// weighs time).
    #[command(flatten)]
    pub calibration: CalibrationArgs,
    /// What the planners may choose (offloading, the update in backward).
    #[command(flatten)]
    pub options: OptionSpaceArgs,
}

/// What `--verify` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// Peak of a real step under the plan, in bytes.
    pub measured_peak_bytes: u64,
    /// Requested, allocated and reserved peaks of that step, in bytes (equal to the planned
    /// ones is the claim).
    pub measured_peaks: AllocatorLevels,
    /// Peak of a real step storing everything, in bytes.
    pub baseline_measured_peak_bytes: u64,
    /// Median baseline step time, in ms.
    pub baseline_step_ms: f64,
    /// Median planned step time, in ms.
    pub planned_step_ms: f64,
    /// Measured extra time, as a fraction of the baseline step (0.18 = 18% slower): the
    /// median over --steps rounds, each a baseline step and a planned step in turn on one
    /// model, of the planned over the baseline step, less 1.
    pub measured_overhead: f64,
    /// The lower and upper quartiles of the per-round overheads, as fractions (the machine's
    /// noise).
    pub measured_overhead_quartiles: (f64, f64),
    /// Whether every parameter gradient of the first step is bit-identical to the baseline's.
    pub grads_identical: bool,
    /// The library's verdict ([`PlanCheck`]): planned and measured peaks, values compared and
    /// those that differ (loss, gradients, running statistics, neuron states, parameters).
    pub check: PlanCheck,
}

/// The JSON of `memopt optimize --json`.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizeJson {
    /// Model name.
    pub model: String,
    /// Batch size N.
    pub batch: usize,
    /// Time steps T.
    pub timesteps: usize,
    /// Shape of one sample.
    pub sample: Vec<usize>,
    /// Strategy name.
    pub strategy: String,
    /// Its setting, in words.
    pub setting: String,
    /// Exact peak of a step storing everything, in bytes.
    pub baseline_peak_bytes: u64,
    /// Exact peak of a step under the plan, in bytes.
    pub planned_peak_bytes: u64,
    /// Exact requested, allocated and reserved peaks of a step storing everything, in bytes.
    pub baseline_peaks: AllocatorLevels,
    /// Exact requested, allocated and reserved peaks of a step under the plan, in bytes.
    pub planned_peaks: AllocatorLevels,
    /// The budget and the peak it bounds (budget strategy only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetFit>,
    /// Predicted extra time, as a fraction of the baseline step time (0.18 = 18% slower).
    pub predicted_overhead: f64,
    /// What predicted the overhead: the calibration file and what it was measured on (absent:
    /// the uncalibrated guesses).
    pub cost_model: CostModelSource,
    /// Time the strategy took, in ms.
    pub planning_ms: f64,
    /// Time to build the planning session (every segment measured on Meta), in ms.
    pub setup_ms: f64,
    /// The hardware planned for when it is not the CPU (`cuda`): every figure is then that
    /// target's, computed on the Meta device without a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The plan (the same JSON as `--out` writes).
    pub plan: Plan,
    /// What the pipeline did, step by step (pipeline only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<PipelineSummary>,
    /// How the caching allocator got its memory for every figure: `expandable_segments`.
    pub allocator: memopt_core::AllocatorConfig,
    /// What `--verify` measured (its fields appear only with `--verify`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verification>,
}

/// Plans and reports.
pub fn run(args: &OptimizeArgs, out: &mut dyn Write) -> Result<()> {
    // Planning needs only the target; real steps (--verify) need the device itself.
    let device = if args.verify {
        parse_device(&args.device)?
    } else {
        parse_planning_device(&args.device)?
    };
    if args.verify && device.is_meta() {
        return Err(CliError::Usage(
            "--verify runs real steps and compares gradients: use --device cpu or cuda[:N]".into(),
        ));
    }
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    let mut outputs = Outputs::new(&[("--out", args.out.as_deref()), ("--svg", args.svg.as_deref())])?;
    let (strategy, setting) = args.strategy.build()?;
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    sel.workload.target = device.target();
    let workload = &sel.workload;
    let started = Instant::now();
    let calibration = args.calibration.load(device)?;
    let (mut session, cost_model) = planning_session(workload, calibration.as_ref(), args.options.space())?;
    let setup_ms = started.elapsed().as_secs_f64() * 1e3;
    let report = strategy.plan(&mut session).map_err(explain)?;
    if let Some(path) = &args.out {
        outputs.stage(path, plan_file_json(&report.plan, &MadeFor::of(&sel)));
    }
    let verify = if args.verify {
        args.limit.check(
            workload,
            &[&Plan::store_all(), &report.plan],
            device,
            &args.model.command_line(),
        )?;
        let base = run_steps(workload, &Plan::store_all(), device, 0)?;
        let planned = run_steps(workload, &report.plan, device, 0)?;
        // Step times in turns on one model, so that the machine's load reaches both alike.
        let timed = TimingProfiler::new(1, args.steps).profile_plans(
            workload,
            &[Plan::store_all(), report.plan.clone()],
            device,
        )?;
        let (base_ms, plan_ms) = match timed.as_slice() {
            [b, p] => (b.step_samples_ms.clone(), p.step_samples_ms.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        let overheads: Vec<f64> = plan_ms
            .iter()
            .zip(&base_ms)
            .map(|(p, b)| p / b.max(1e-9) - 1.0)
            .collect();
        let check = PlanCheck::compare(
            &base.record,
            &planned.record,
            report.planned_peak_bytes,
            plan_is_data_dependent(&report.plan),
        );
        Some(Verification {
            measured_peak_bytes: planned.peak_bytes(),
            measured_peaks: planned.record.allocator_peaks,
            baseline_measured_peak_bytes: base.peak_bytes(),
            baseline_step_ms: median(&base_ms),
            planned_step_ms: median(&plan_ms),
            measured_overhead: median(&overheads),
            measured_overhead_quartiles: quartiles(&overheads),
            grads_identical: !check.mismatches.iter().any(|m| m.quantity == Quantity::Gradient),
            check,
        })
    } else {
        None
    };
    let chart = match &args.svg {
        Some(p) => {
            let (charted, svg) = chart(&sel, Some(&report.plan))?;
            outputs.stage(p, svg);
            Some((charted, p))
        }
        None => None,
    };
    // The verifying step runs with no reserve limit: a budget plan that fits its device only by
    // releasing the cache at the limit reserves its unbounded figure there.
    let mut expected_peaks = report.planned_peaks;
    if let Some(unbounded) = report.budget.as_ref().and_then(|b| b.unbounded_reserved_bytes) {
        expected_peaks.reserved_bytes = unbounded;
    }
    let failure = verify
        .as_ref()
        .and_then(|v| {
            v.check.failure().or_else(|| {
                (v.measured_peaks != expected_peaks).then(|| {
                    format!(
                        "the step's allocator peaks (requested, allocated, reserved: {:?}) differ from the planned ones ({:?})",
                        v.measured_peaks, expected_peaks
                    )
                })
            })
        })
        .map(CliError::Verification);
    // Outputs are written only when the whole command succeeded.
    let written = failure.is_none();
    if written {
        outputs.commit()?;
    }
    if args.json {
        let json = OptimizeJson {
            model: report.model.clone(),
            batch: report.batch,
            timesteps: report.timesteps,
            sample: sel.spec.sample.clone(),
            strategy: report.strategy.clone(),
            setting,
            baseline_peak_bytes: report.baseline_peak_bytes,
            planned_peak_bytes: report.planned_peak_bytes,
            baseline_peaks: report.baseline_peaks,
            planned_peaks: report.planned_peaks,
            budget: report.budget,
            predicted_overhead: report.predicted_overhead,
            cost_model: cost_model.clone(),
            planning_ms: report.planning_ms,
            setup_ms,
            plan: report.plan.clone(),
            summary: report.summary.clone(),
            target: (device.target() != Target::Cpu).then(|| device.target().to_string()),
            allocator: memopt_core::AllocatorConfig::current(),
            verify,
        };
        out!(out, "{}", serde_json::to_string_pretty(&json).unwrap_or_default())?;
        return failure.map_or(Ok(()), Err);
    }
    out!(out, "{}", sel.describe())?;
    if device.target() != Target::Cpu {
        out!(
            out,
            "target: {} (planned on the Meta device with the {} backend's workspace rules; no GPU needed)",
            device.target(),
            device.target()
        )?;
    }
    out!(out, "strategy: {} ({setting})", report.strategy)?;
    let allocator = memopt_core::AllocatorConfig::current();
    let other = memopt_core::AllocatorConfig {
        expandable_segments: !allocator.expandable_segments,
    };
    out!(
        out,
        "allocator: {} segments (--expandable-segments {}, or MEMOPT_ALLOC_CONF=expandable_segments:{}, for {} ones)",
        allocator.segments_name(),
        other.expandable_segments,
        if other.expandable_segments {
            "True"
        } else {
            "False"
        },
        other.segments_name(),
    )?;
    let (base_reserved, planned_reserved) = (
        report.baseline_peaks.reserved_bytes,
        report.planned_peaks.reserved_bytes,
    );
    out!(
        out,
        "baseline peak       {:>12}  reserved ({} bytes, storing everything); requested {}",
        bytes(base_reserved),
        base_reserved,
        bytes(report.baseline_peak_bytes)
    )?;
    out!(
        out,
        "planned peak        {:>12}  reserved ({} bytes, {}, {:.2}x reduction, exact); requested {} ({:.2}x)",
        bytes(planned_reserved),
        planned_reserved,
        percent(planned_reserved as f64 / base_reserved.max(1) as f64 - 1.0),
        base_reserved as f64 / planned_reserved.max(1) as f64,
        bytes(report.planned_peak_bytes),
        report.reduction()
    )?;
    out!(
        out,
        "{:20}{:>12} {:>12} {:>12} {:>14}",
        "",
        "requested",
        "allocated",
        "reserved",
        "fragmentation"
    )?;
    for (label, l) in [
        ("baseline peaks", report.baseline_peaks),
        ("planned peaks", report.planned_peaks),
    ] {
        out!(
            out,
            "{label:20}{:>12} {:>12} {:>12} {:>14}",
            bytes(l.requested_bytes),
            bytes(l.allocated_bytes),
            bytes(l.reserved_bytes),
            bytes(l.fragmentation_bytes())
        )?;
    }
    if report.host_peak_bytes > 0 {
        out!(
            out,
            "host memory         {:>12}  ({} bytes at the peak: offloaded payloads and boundary states, exact)",
            bytes(report.host_peak_bytes),
            report.host_peak_bytes
        )?;
    }
    if let Some(b) = &report.budget {
        out!(
            out,
            "budget              {:>12}  on the {} peak ({} bytes): the plan's is {} ({} bytes), checked with a Meta step ({} candidate(s))",
            bytes(b.bytes),
            b.kind,
            b.bytes,
            bytes(b.kind.of(&report.planned_peaks)),
            b.kind.of(&report.planned_peaks),
            b.candidates_checked
        )?;
        if let Some(unbounded) = b.unbounded_reserved_bytes {
            out!(
                out,
                "                                it fits a device of {} because the caching allocator releases its cached segments there and retries, as PyTorch's does on a full device (with no limit it would reserve {})",
                bytes(b.bytes),
                bytes(unbounded)
            )?;
        }
    }
    out!(
        out,
        "optimizer update    {:>12}  {}",
        if report.plan.update_in_backward {
            "in backward"
        } else {
            "after"
        },
        if report.plan.update_in_backward {
            "each parameter's as soon as its gradient is final, which is then freed"
        } else {
            "backward, every gradient held until then"
        }
    )?;
    out!(
        out,
        "predicted overhead  {:>12}  of the baseline step time",
        percent(report.predicted_overhead),
    )?;
    out!(out, "{}", cost_model.describe())?;
    out!(
        out,
        "planning            {:>9.1} ms  (+ {:.1} ms measuring the segments on Meta)",
        report.planning_ms,
        setup_ms
    )?;
    let n = report.plan.entries.len();
    out!(out, "\nplan ({n} {}):", if n == 1 { "entry" } else { "entries" })?;
    out!(
        out,
        "{}",
        plan_tree(&session.model().modules(), &report.plan).trim_end()
    )?;
    if let Some(summary) = &report.summary {
        out!(
            out,
            "\npipeline: {} wrapped, {} split, {} chunked, {} unwrapped. {}",
            summary.wrapped,
            summary.split,
            summary.chunked,
            summary.unwrapped,
            summary.recommendation
        )?;
    }
    if let Some(path) = &args.out {
        if written {
            out!(
                out,
                "\nwrote the plan to {} (use it with `memopt train --plan`)",
                path.display()
            )?;
        } else {
            out!(
                out,
                "\nthe plan was not written to {} (verification failed)",
                path.display()
            )?;
        }
    }
    if let Some(v) = &verify {
        out!(
            out,
            "\nverify ({device}, a fresh model with the same seeds, with and without the plan):"
        )?;
        out!(
            out,
            "  measured peak     {:>12}  baseline {} ({})",
            bytes(v.measured_peak_bytes),
            bytes(v.baseline_measured_peak_bytes),
            if v.measured_peak_bytes == report.planned_peak_bytes {
                "the planned peak, to the byte"
            } else {
                "differs from the planned peak"
            }
        )?;
        let m = v.measured_peaks;
        out!(
            out,
            "  allocator peaks   {} requested, {} allocated, {} reserved ({})",
            bytes(m.requested_bytes),
            bytes(m.allocated_bytes),
            bytes(m.reserved_bytes),
            if m == expected_peaks {
                if expected_peaks == report.planned_peaks {
                    "the planned ones, to the byte"
                } else {
                    "the planned ones to the byte, reserved without the budget's limit"
                }
            } else {
                "differ from the planned ones"
            }
        )?;
        out!(
            out,
            "  step time         {:>9.2} ms  baseline {:.2} ms ({} measured, middle half of {} rounds {}..{}; {} predicted)",
            v.planned_step_ms,
            v.baseline_step_ms,
            percent(v.measured_overhead),
            args.steps,
            percent(v.measured_overhead_quartiles.0),
            percent(v.measured_overhead_quartiles.1),
            percent(report.predicted_overhead)
        )?;
        out!(
            out,
            "  values            {}",
            if v.check.bit_identical() {
                format!(
                    "loss, gradients, running statistics, neuron states and updated parameters \
                     bit-identical to the baseline ({} compared)",
                    v.check.compared
                )
            } else {
                format!(
                    "{} of {} DIFFER from the baseline",
                    v.check.mismatches.len(),
                    v.check.compared
                )
            }
        )?;
    }
    if let Some((c, p)) = chart.filter(|_| written) {
        out!(
            out,
            "\nwrote {} (baseline {} and planned {} timelines)",
            p.display(),
            bytes(c.baseline_peak),
            bytes(c.planned_peak)
        )?;
    }
    failure.map_or(Ok(()), Err)
}
