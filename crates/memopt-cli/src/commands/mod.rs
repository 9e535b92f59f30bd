//! The subcommands, one file each, and what they share: reading plans and writing charts.

pub mod bench;
pub mod calibrate;
pub mod dataset;
pub mod eval;
pub mod frames;
pub mod models;
pub mod optimize;
pub mod plot;
pub mod profile;
pub mod run_memory;
pub mod train;
pub mod train_chart;
pub mod train_data;

use crate::error::Result;
use crate::files::read_input;
use crate::plan_file::{MadeFor, made_for};
use crate::selection::Selection;
use crate::svg::{Series, render};
use crate::timeline::record;
use memopt_checkpoint::Plan;
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::Estimator;
use std::collections::HashMap;
use std::path::Path;

/// Reads a plan written by `memopt optimize --out`, with what it says it was made for.
pub fn read_plan(path: &Path) -> Result<(Plan, Option<MadeFor>)> {
    let text = read_input(path, "plan")?;
    let plan = Plan::from_json(&text).map_err(|e| {
        crate::CliError::Invalid(format!(
            "{}: {e} (write plans with `memopt optimize --out FILE`)",
            path.display()
        ))
    })?;
    let made = made_for(&text).map_err(|e| {
        crate::CliError::Invalid(format!(
            "{}: {e} (write plans with `memopt optimize --out FILE`)",
            path.display()
        ))
    })?;
    Ok((plan, made))
}

/// Reads a plan and checks that it fits the selected model (every path exists, every policy
/// suits its module), naming the file and the model when it does not. A plan made for another
/// model, size or memopt version gets a warning on stderr.
pub fn read_plan_for(path: &Path, sel: &Selection) -> Result<Plan> {
    let (plan, made_for) = read_plan(path)?;
    if let Some(made) = made_for {
        for why in made.differences(&MadeFor::of(sel)) {
            eprintln!("warning: {}: {why}", path.display());
        }
    }
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

/// The SVG chart of `selection`'s step, storing everything and, when given, under `plan`, and
/// what it shows. Everything is computed on Meta (exact, no data).
pub fn chart(selection: &Selection, plan: Option<&Plan>) -> Result<(Charted, String)> {
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
            Some(p) => format!(
                ": baseline and a plan of {}",
                crate::format::count(p.entries.len(), "entry", "entries")
            ),
            None => ": baseline".into(),
        }
    );
    let module_types: HashMap<String, &str> = {
        let _meta = MemoryTracker::install(MemoryTracker::new(Device::META));
        workload
            .build_model(Device::META)?
            .modules()
            .into_iter()
            .map(|m| (m.path, m.type_name))
            .collect()
    };
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
        &module_types,
    );
    let charted = Charted {
        baseline_events: base_timeline.points.len(),
        planned_events: planned.as_ref().map_or(0, |(_, t)| t.points.len()),
        baseline_peak: base_report.peak_bytes,
        planned_peak: planned
            .as_ref()
            .map_or(base_report.peak_bytes, |(r, _)| r.peak_bytes),
    };
    Ok((charted, svg))
}
