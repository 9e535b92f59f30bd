//! The subcommands, one file each, and what they share: reading plans and writing charts.

pub mod bench;
pub mod models;
pub mod optimize;
pub mod plot;
pub mod profile;
pub mod train;

use crate::error::{Result, read_file, write_file};
use crate::selection::Selection;
use crate::svg::{Series, render};
use crate::timeline::record;
use memopt_checkpoint::Plan;
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::Estimator;
use std::path::Path;

/// Reads a plan written by `memopt optimize --out`.
pub fn read_plan(path: &Path) -> Result<Plan> {
    let text = read_file(path)?;
    Plan::from_json(&text).map_err(|e| {
        crate::CliError::Invalid(format!(
            "{}: {e} (write plans with `memopt optimize --out FILE`)",
            path.display()
        ))
    })
}

/// Reads a plan and checks that it fits the selected model (every path exists, every policy
/// suits its module), naming the file and the model when it does not.
pub fn read_plan_for(path: &Path, sel: &Selection) -> Result<Plan> {
    let plan = read_plan(path)?;
    let misfit = |e: String| {
        crate::CliError::Invalid(format!(
            "the plan {} does not fit {}: {e}",
            path.display(),
            sel.name()
        ))
    };
    let mut model = {
        let _meta = MemoryTracker::install(MemoryTracker::new(Device::META));
        sel.workload.build_model(Device::META)?
    };
    model.apply_plan(&plan).map_err(|e| misfit(e.to_string()))?;
    Ok(plan)
}

/// What a chart shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charted {
    /// Events of the baseline step.
    pub baseline_events: usize,
    /// Events of the planned step (0 without a plan).
    pub planned_events: usize,
    /// Baseline peak, in bytes.
    pub baseline_peak: u64,
    /// Planned peak, in bytes (the baseline's without a plan).
    pub planned_peak: u64,
}

/// Writes the SVG chart of `selection`'s step, storing everything and, when given, under
/// `plan`, to `path`. Everything is computed on Meta (exact, no data).
pub fn write_chart(selection: &Selection, plan: Option<&Plan>, path: &Path) -> Result<Charted> {
    let workload = &selection.workload;
    let mut estimator = Estimator::new(workload)?;
    let store = Plan::store_all();
    let base_report = estimator.report(&store)?;
    let base_timeline = record(workload, &store)?;
    let planned = match plan {
        Some(p) => Some((estimator.report(p)?, record(workload, p)?)),
        None => None,
    };
    let title = format!(
        "{} (T={}, N={}, input {:?}){}",
        selection.name(),
        selection.spec.time_steps,
        workload.batch_size,
        selection.spec.sample,
        match plan {
            Some(p) => format!(": baseline and a plan of {} entries", p.entries.len()),
            None => ": baseline".into(),
        }
    );
    let svg = render(
        &title,
        Series {
            timeline: &base_timeline,
            report: &base_report,
        },
        planned.as_ref().map(|(r, t)| Series {
            timeline: t,
            report: r,
        }),
    );
    write_file(path, &svg)?;
    Ok(Charted {
        baseline_events: base_timeline.points.len(),
        planned_events: planned.as_ref().map_or(0, |(_, t)| t.points.len()),
        baseline_peak: base_report.peak_bytes,
        planned_peak: planned
            .as_ref()
            .map_or(base_report.peak_bytes, |(r, _)| r.peak_bytes),
    })
}
