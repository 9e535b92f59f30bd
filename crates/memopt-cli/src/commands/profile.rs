//! `memopt profile`: per-module memory and time of one training step, the peak and who holds it.

use super::{chart, read_plan_for};
use crate::device_arg::{DEVICE_VALUES, parse_device};
use crate::error::{CliError, Result};
use crate::files::Outputs;
use crate::format::{bytes, path};
use crate::gpu_memory::GpuMemory;
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use memopt_checkpoint::Plan;
use memopt_profiler::memory::{AllocatorFigures, Holder, KindBytes};
use memopt_profiler::{Estimator, MemoryReport, TimingProfiler, TimingReport, profile_memory};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

/// Long help of `memopt profile`.
pub const LONG_ABOUT: &str = "\
Measure one training step (forward, loss, backward, optimizer update: SGD momentum, or Adam with
--optimizer adam) on synthetic data: the peak, what it is made of (parameters, optimizer state,
activations saved for backward, packed spikes, workspace, ...), which modules hold it, and per
module and phase (forward, backward, recompute) the bytes allocated, held at exit, the peak
reached inside and the time taken. The step is the one `memopt train` runs and plans are made
for: it keeps no final neuron state (each is freed as soon as nothing reads it).

--device cpu measures a real step (and times it over --runs steps); --device cuda[:N] does so on
a GPU (times from CUDA events; the GPU memory outside memopt's pool is reported separately);
--device meta computes the same memory figures to the byte without running anything (no times);
--device meta:cuda computes what the step would allocate on a GPU, with the CUDA backend's rules,
and the host memory a plan's offloading holds. --plan profiles the step
under a plan written by `memopt optimize --out`.";

/// Options of `memopt profile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProfileArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where the step runs: cpu, cuda or cuda:N (measured and timed; CUDA steps are timed with
    /// CUDA events), meta (exact memory, no data, no time), meta:cuda (exact memory of the step
    /// on a GPU, computed without one).
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
    /// Profile under this plan (from `memopt optimize --out`) instead of storing everything.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Timed steps (after one warm-up) for the per-module times.
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = crate::selection::whole, allow_hyphen_values = true)]
    pub runs: usize,
    /// Deepest module level in the table (0 = the whole model only).
    #[arg(long, default_value_t = 2, value_name = "D")]
    pub depth: usize,
    /// Modules listed as holders of the peak.
    #[arg(long, default_value_t = 8, value_name = "K")]
    pub top: usize,
    /// Print JSON (peak_bytes, by_kind, holders, modules) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG chart of the step's memory to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// The memory limit checked before the CPU step.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
}

/// One module in one phase, memory and time.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleRow {
    /// Module path (`""` for the root).
    pub path: String,
    /// Module type.
    #[serde(rename = "type")]
    pub module_type: String,
    /// `forward`, `backward`, `recompute` or `optimizer`.
    pub phase: String,
    /// Separate stretches of time spent in it.
    pub visits: u64,
    /// Bytes allocated inside it (children included).
    pub allocated_bytes: u64,
    /// Bytes allocated inside it and still held when it was left.
    pub held_at_exit_bytes: u64,
    /// Most bytes held on the device while inside it.
    pub peak_bytes: u64,
    /// Bytes it kept for backward.
    pub saved_bytes: u64,
    /// Bytes of compressed payloads allocated inside it.
    pub packed_bytes: u64,
    /// Median wall time, in ms (`null` on Meta).
    pub time_ms: Option<f64>,
}

/// The JSON of `memopt profile --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileJson {
    /// Model name.
    pub model: String,
    /// Batch size N.
    pub batch: usize,
    /// Time steps T.
    pub timesteps: usize,
    /// Shape of one sample.
    pub sample: Vec<usize>,
    /// `cpu`, `meta` or `cuda:N`.
    pub device: String,
    /// Entries of the plan profiled (0: store everything).
    pub plan_entries: usize,
    /// Most bytes held at once during the step, everything included.
    pub peak_bytes: u64,
    /// Module path where the peak was reached.
    pub peak_path: String,
    /// Phase in which it was reached.
    pub peak_phase: String,
    /// Bytes per kind at the peak.
    pub by_kind: KindBytes,
    /// Requested, allocated and reserved peaks of the caching allocator, the three levels at
    /// each peak, and the fragmentation (reserved - allocated).
    pub allocator: AllocatorFigures,
    /// Who holds the peak, largest first.
    pub holders: Vec<Holder>,
    /// Median step time, in ms (`null` on Meta).
    pub step_ms: Option<f64>,
    /// On Meta of a GPU: the most bytes the step holds in host memory for offloaded payloads
    /// and boundary states (exact; absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_peak_bytes: Option<u64>,
    /// Per module and phase.
    pub modules: Vec<ModuleRow>,
    /// On a GPU: its memory after the timed steps, memopt's pool and what lies outside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuMemory>,
}

fn depth(p: &str) -> usize {
    if p.is_empty() {
        0
    } else {
        p.matches('.').count() + 1
    }
}

fn rows(report: &MemoryReport, timing: Option<&TimingReport>) -> Vec<ModuleRow> {
    report
        .modules
        .iter()
        .map(|m| ModuleRow {
            path: m.path.clone(),
            module_type: m.module_type.clone(),
            phase: m.phase.name().to_string(),
            visits: m.visits,
            allocated_bytes: m.allocated_bytes,
            held_at_exit_bytes: m.held_at_exit_bytes,
            peak_bytes: m.peak_bytes,
            saved_bytes: m.saved_bytes,
            packed_bytes: m.packed_bytes,
            time_ms: timing.map(|t| t.median_ms(&m.path, m.phase)),
        })
        .collect()
}

/// Profiles one step.
pub fn run(args: &ProfileArgs, out: &mut dyn Write) -> Result<()> {
    let device = parse_device(&args.device)?;
    let mut outputs = Outputs::new(&[("--svg", args.svg.as_deref())])?;
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    // `--device meta:cuda` estimates what the step allocates on a GPU.
    sel.workload.target = device.target();
    let plan = match &args.plan {
        Some(p) => read_plan_for(p, &sel)?,
        None => Plan::store_all(),
    };
    if args.runs == 0 && !device.is_meta() {
        return Err(CliError::Usage("--runs must be at least 1".into()));
    }
    let workload = &sel.workload;
    args.limit
        .check(workload, &[&plan], device, &args.model.command_line())?;
    let (report, host_peak_bytes) = if device.is_meta() {
        let mut estimator = Estimator::new(workload)?;
        let report = estimator.report(&plan)?;
        let host = device.has_separate_host().then(|| estimator.host_peak_bytes());
        (report, host)
    } else {
        (profile_memory(workload, &plan, device)?, None)
    };
    let timing = if device.is_meta() {
        None
    } else {
        Some(TimingProfiler::new(1, args.runs).profile(workload, &plan, device)?)
    };
    // The timed steps ran in this thread's tracker for the device; its pool holds their
    // segments now.
    let gpu = GpuMemory::measure(device, &memopt_core::MemoryTracker::current(device))?;
    let chart = match &args.svg {
        Some(p) => {
            let (charted, svg) = chart(&sel, (plan != Plan::store_all()).then_some(&plan))?;
            outputs.stage(p, svg);
            Some((charted, p))
        }
        None => None,
    };
    outputs.commit()?;
    let modules = rows(&report, timing.as_ref());
    if args.json {
        let json = ProfileJson {
            model: sel.name().to_string(),
            batch: workload.batch_size,
            timesteps: sel.spec.time_steps,
            sample: sel.spec.sample.clone(),
            device: device.to_string(),
            plan_entries: plan.entries.len(),
            peak_bytes: report.peak_bytes,
            peak_path: report.peak_path.clone(),
            peak_phase: report.peak_phase.name().to_string(),
            by_kind: report.by_kind,
            allocator: report.allocator,
            holders: report.holders.clone(),
            step_ms: timing.as_ref().map(|t| t.step_ms),
            host_peak_bytes,
            modules,
            gpu,
        };
        return out!(out, "{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    }
    out!(out, "{}", sel.describe())?;
    out!(out, "{}", report.table(args.top, false).trim_end())?;
    if let Some(host) = host_peak_bytes.filter(|&b| b > 0) {
        out!(
            out,
            "host memory: {} ({host} bytes at the peak: offloaded payloads and boundary states, exact)",
            crate::format::bytes(host)
        )?;
    }
    if let Some(t) = &timing {
        out!(
            out,
            "\nstep time: {:.2} ms (median of {} after {} warm-up)",
            t.step_ms,
            crate::format::count(t.runs, "step", "steps"),
            t.warmup_runs
        )?;
    }
    if let Some(g) = &gpu {
        out!(out, "{}", g.line())?;
    }
    out!(
        out,
        "\nper module and phase (depth <= {}; --depth for more){}:",
        args.depth,
        if timing.is_none() {
            ", no times on meta"
        } else {
            ""
        }
    )?;
    let shown: Vec<&ModuleRow> = modules
        .iter()
        .filter(|m| depth(&m.path) <= args.depth && m.phase != "setup")
        .collect();
    let width = shown
        .iter()
        .map(|m| 2 * depth(&m.path) + path(&m.path).len())
        .max()
        .unwrap_or(8)
        .max(8);
    let tw = shown
        .iter()
        .map(|m| m.module_type.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out!(
        out,
        "  {:<width$}  {:<tw$} {:<9} {:>11} {:>11} {:>11} {:>11} {:>9}",
        "module",
        "type",
        "phase",
        "allocated",
        "held@exit",
        "peak",
        "saved",
        "ms"
    )?;
    for m in shown {
        let name = format!("{}{}", "  ".repeat(depth(&m.path)), path(&m.path));
        out!(
            out,
            "  {:<width$}  {:<tw$} {:<9} {:>11} {:>11} {:>11} {:>11} {:>9}",
            name,
            m.module_type,
            m.phase,
            bytes(m.allocated_bytes),
            bytes(m.held_at_exit_bytes),
            bytes(m.peak_bytes),
            bytes(m.saved_bytes),
            m.time_ms.map_or("-".to_string(), |t| format!("{t:.3}"))
        )?;
    }
    if let Some((c, p)) = chart {
        out!(
            out,
            "\nwrote {} (memory timeline of {}, peak {})",
            p.display(),
            crate::format::count(c.planned_events.max(c.baseline_events), "event", "events"),
            bytes(c.planned_peak)
        )?;
    }
    Ok(())
}
