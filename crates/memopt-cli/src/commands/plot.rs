//! `memopt plot`: the SVG chart of a step's memory, baseline and planned.

use super::{chart, read_plan_for};
use crate::device_arg::{DEVICE_VALUES, parse_planning_device};
use crate::error::{CliError, Result};
use crate::files::Outputs;
use crate::format::{bytes, count};
use crate::out;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use crate::strategy::{StrategyArgs, explain};
use memopt_search::PlanningSession;
use std::io::Write;
use std::path::PathBuf;

/// Long help of `memopt plot`.
pub const LONG_ABOUT: &str = "\
Write an SVG chart of one training step's memory: the timeline (MiB held after each allocation
or free; the planned step stacked by kind: parameters, optimizer state, activations, saved for
backward, packed spikes, gradients, workspace, ...; the baseline's total as a dashed line), and a
horizontal bar chart of what the largest modules hold at the peak, baseline above planned, each
module labelled with its layer type.
The x axis is the step phase by phase and module by module: baseline and plan are aligned on the
same modules (a module whose backward recomputes gets a wider span in both), bands mark forward,
backward, optimizer (when it allocates; SGD and Adam update in place) and the release of the
tape and gradients at the end, and a red strip under the axis marks the plan's recomputation.
The plan is read from --plan, or made with the strategy options (as `memopt optimize`).
Everything is computed on the Meta device: exact, and in milliseconds.";

/// Options of `memopt plot`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlotArgs {
    /// The model and its size [default model: cifar10dvs-vgg].
    #[command(flatten)]
    pub model: ModelArgs,
    /// The plan to chart (from `memopt optimize --out`) instead of planning one.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// The strategy of the plan when --plan is not given.
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// Chart the baseline only.
    #[arg(long)]
    pub baseline_only: bool,
    /// The SVG file to write.
    #[arg(short, long, default_value = "memopt.svg", value_name = "FILE")]
    pub out: PathBuf,
    /// The device whose step is charted: cpu, or cuda[:N] for a GPU's allocation rules
    /// (computed on Meta either way; no GPU needed).
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
}

/// Plots.
pub fn run(args: &PlotArgs, out: &mut dyn Write) -> Result<()> {
    let strategy_given = args.strategy.strategy.is_some()
        || args.strategy.budget.is_some()
        || args.strategy.max_overhead.is_some()
        || args.strategy.level.is_some()
        || args.strategy.profile.is_some()
        || args.strategy.prefer.is_some()
        || args.strategy.max_wrapped.is_some();
    if (args.plan.is_some() || args.baseline_only) && strategy_given {
        return Err(CliError::Usage(
            "strategy options make a plan; they cannot be combined with --plan or --baseline-only".into(),
        ));
    }
    if args.plan.is_some() && args.baseline_only {
        return Err(CliError::Usage(
            "--plan and --baseline-only exclude each other".into(),
        ));
    }
    let mut outputs = Outputs::new(&[("--out", Some(args.out.as_path()))])?;
    let device = parse_planning_device(&args.device)?;
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    sel.workload.target = device.target();
    let plan = match (&args.plan, args.baseline_only) {
        (Some(p), _) => Some(read_plan_for(p, &sel)?),
        (None, true) => None,
        (None, false) => {
            let (strategy, _) = args.strategy.build()?;
            let mut session = PlanningSession::new(&sel.workload)?;
            Some(strategy.plan(&mut session).map_err(explain)?.plan)
        }
    };
    let (c, svg) = chart(&sel, plan.as_ref())?;
    outputs.stage(&args.out, svg);
    outputs.commit()?;
    match plan {
        Some(p) => out!(
            out,
            "wrote {}: {}; baseline peak {} ({}), planned peak {} ({}, {})",
            args.out.display(),
            sel.describe(),
            bytes(c.baseline_peak),
            count(c.baseline_events, "event", "events"),
            bytes(c.planned_peak),
            count(c.planned_events, "event", "events"),
            count(p.entries.len(), "plan entry", "plan entries")
        ),
        None => out!(
            out,
            "wrote {}: {}; baseline peak {} ({})",
            args.out.display(),
            sel.describe(),
            bytes(c.baseline_peak),
            count(c.baseline_events, "event", "events")
        ),
    }
}
