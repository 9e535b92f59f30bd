//! Every strategy side by side for one workload: exact peak, measured CPU peak and step time,
//! measured and predicted overhead side by side (and their largest gap), planning time. Shared
//! by `memopt bench` and the whole-model tables of `cargo xtask bench`.

use crate::calibration::{CostModelSource, LoadedCalibration, cost_model, planning_session};
use crate::error::Result;
use crate::format::bytes;
use crate::selection::Selection;
use crate::steps::run_steps;
use crate::strategy::explain;
use memopt_checkpoint::Plan;
use memopt_core::Device;
use memopt_profiler::timing::{median, quartiles};
use memopt_profiler::{PlanCheck, Quantity, TimingProfiler, plan_is_data_dependent};
use memopt_search::builder::OptionSpace;
use memopt_search::{
    Budget, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, PlanReport, SearchError, Strategy,
};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One strategy's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// `baseline` (store everything), `pipeline`, `memonger`, `budget`, `max-overhead`,
    /// `min-memory`, or `plan file` (a plan given to the bench).
    pub strategy: String,
    /// Its setting (`level 4`, `20%`, the budget in MiB, ...).
    pub setting: String,
    /// Exact (requested) peak of a step under the plan (Meta estimate), in bytes.
    pub peak_bytes: u64,
    /// Exact reserved peak of a step under the plan (the caching allocator's segments, what a
    /// budget bounds), in bytes.
    #[serde(default)]
    pub reserved_peak_bytes: u64,
    /// Peak measured by a real CPU step, in bytes (equal to `peak_bytes` for every
    /// data-independent plan).
    pub measured_peak_bytes: u64,
    /// Median wall time of a step, in ms (steps of every row run in turns, see
    /// [`BenchReport::timed_steps`]).
    pub step_ms: f64,
    /// Fastest timed step, in ms.
    pub step_ms_min: f64,
    /// Slowest timed step, in ms.
    pub step_ms_max: f64,
    /// Measured extra time over the baseline step, as a fraction (0.18 = 18% slower): the
    /// median over rounds of this row's step over the baseline's step of the same round, less 1.
    pub overhead: f64,
    /// The lower and upper quartiles of those per-round overheads, as fractions: how far the
    /// middle half of the rounds spread (noise of the machine, not of the plan).
    #[serde(default)]
    pub overhead_quartiles: (f64, f64),
    /// The cost model's predicted extra time (the model the strategies planned with), as a
    /// fraction.
    pub predicted_overhead: f64,
    /// The uncalibrated cost model's prediction for the same plan, as a fraction (only when
    /// the bench is calibrated: before and after, on the same plans and measurements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_overhead_uncalibrated: Option<f64>,
    /// Time the strategy took, in ms (the planning session's setup excluded).
    pub planning_ms: f64,
    /// Entries of the plan.
    pub entries: usize,
    /// Whether the first step's gradients are bit-identical to the baseline's.
    pub grads_identical: bool,
    /// Whether everything the first step produced (loss, gradients, running statistics, neuron
    /// states, updated parameters) is bit-identical to the baseline's.
    pub bit_identical: bool,
    /// Why the candidate was rejected: its real steps ran out of device memory, or no plan
    /// meets the budget (then the measured figures are 0 and nothing was compared); absent for
    /// a measured row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
}

/// All strategies on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Model name.
    pub model: String,
    /// Batch size N.
    pub batch: usize,
    /// Time steps T.
    pub timesteps: usize,
    /// Shape of one sample.
    pub sample: Vec<usize>,
    /// Optimizer (`sgd` or `adam`).
    pub optimizer: String,
    /// Time to build the planning session (every segment measured on Meta), in ms.
    pub session_setup_ms: f64,
    /// Rounds timed: each round runs one step of every measured row's plan in turn on one
    /// model (after one warm-up round and each plan's first step on a fresh model), so that a
    /// change in the machine's load reaches every row alike.
    pub timed_steps: usize,
    /// What predicted the times.
    pub cost_model: CostModelSource,
    /// One row per strategy, the baseline first.
    pub rows: Vec<BenchRow>,
    /// The measured row whose predicted overhead is farthest from its measured one.
    pub largest_gap: Option<OverheadGap>,
    /// The same for the uncalibrated predictions (only when the bench is calibrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_gap_uncalibrated: Option<OverheadGap>,
}

/// How far one row's predicted overhead is from its measured one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadGap {
    /// The row's strategy.
    pub strategy: String,
    /// Predicted overhead, as a fraction.
    pub predicted_overhead: f64,
    /// Measured overhead, as a fraction.
    pub overhead: f64,
    /// Predicted less measured, in percentage points (positive: the model overestimates).
    pub points: f64,
    /// Whether the prediction lies within the quartiles of the row's per-round overheads:
    /// then the gap is no larger than the machine's noise.
    pub within_noise: bool,
}

impl OverheadGap {
    /// The row among `rows` (measured ones only) whose `predicted` is farthest from its
    /// measured overhead.
    fn largest(rows: &[BenchRow], predicted: impl Fn(&BenchRow) -> Option<f64>) -> Option<OverheadGap> {
        rows.iter()
            .filter(|r| r.rejected.is_none())
            .filter_map(|r| {
                predicted(r).map(|p| OverheadGap {
                    strategy: r.strategy.clone(),
                    predicted_overhead: p,
                    overhead: r.overhead,
                    points: (p - r.overhead) * 100.0,
                    within_noise: (r.overhead_quartiles.0..=r.overhead_quartiles.1).contains(&p),
                })
            })
            .max_by(|a, b| a.points.abs().total_cmp(&b.points.abs()))
    }

    /// `memonger: predicted +33.0%, measured +5.0% (+28.0 points, outside the middle half of
    /// its rounds)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: predicted {:+.1}%, measured {:+.1}% ({:+.1} points, {} the middle half of its rounds)",
            self.strategy,
            self.predicted_overhead * 100.0,
            self.overhead * 100.0,
            self.points,
            if self.within_noise { "within" } else { "outside" }
        )
    }
}

/// Plans with every strategy and measures each plan with real steps on `device` (the CPU or a
/// GPU): one step on a fresh model for the peak and the values, then `timed_steps` rounds that
/// run one step of every plan in turn on one model, for the step times and overheads. The
/// strategies plan with the cost model calibrated by `calibration` when given (and each row
/// also carries the uncalibrated prediction of its plan), else the uncalibrated one. The
/// budget row asks for the reserved peak midway between the min-memory plan's and the
/// baseline's (always feasible: the budget search ends with the min-memory plan) unless
/// `budget` is given; a budget no plan meets rejects that row with the reason. A candidate
/// whose steps run out of device memory is rejected likewise and the others are still
/// measured; the baseline must fit. Each of `plan_files` (a name, and a plan read from it)
/// adds a row after the strategies', strategy `plan file`, setting the name. The strategies
/// plan in `space` (offloading, the update in backward).
pub fn bench(
    selection: &Selection,
    timed_steps: usize,
    budget: Option<Budget>,
    device: Device,
    calibration: Option<&LoadedCalibration>,
    plan_files: &[(String, Plan)],
    space: OptionSpace,
) -> Result<BenchReport> {
    let workload = &selection.workload;
    let started = Instant::now();
    let (mut session, source) = planning_session(workload, calibration, space)?;
    let session_setup_ms = started.elapsed().as_secs_f64() * 1e3;
    let uncalibrated = match calibration {
        Some(_) => Some(cost_model(workload, None)?.0),
        None => None,
    };
    let baseline_peaks = session.baseline_peaks();
    let least = MinMemory::default().plan(&mut session)?;
    let budget = budget.unwrap_or_else(|| {
        let (low, high) = (least.planned_peaks.reserved_bytes, baseline_peaks.reserved_bytes);
        Budget::Bytes(low + high.saturating_sub(low) / 2)
    });
    let budget_setting = match budget {
        Budget::Bytes(b) => format!("reserved peak at most {}", bytes(b)),
        Budget::Fraction(f) => format!("reserved peak at most {:.0}% of the baseline's", f * 100.0),
    };
    let planners: Vec<(Box<dyn Strategy>, String)> = vec![
        (Box::new(Pipeline::default()), "level 4, prefer balanced".into()),
        (Box::new(Memonger::default()), "sqrt threshold search".into()),
        (Box::new(BudgetStrategy::reserved(budget)), budget_setting),
        (Box::new(MaxOverhead::new(0.2)), "at most 20% predicted".into()),
    ];
    // A plan per strategy, or the reason it has none (a budget no plan meets).
    let mut planned: Vec<(String, String, std::result::Result<PlanReport, String>)> = Vec::new();
    for (s, setting) in planners {
        let name = s.name().to_string();
        match s.plan(&mut session) {
            Ok(r) => planned.push((name, setting, Ok(r))),
            Err(e @ SearchError::Infeasible { .. }) => {
                planned.push((name, setting, Err(explain(e).to_string())))
            }
            Err(e) => return Err(explain(e)),
        }
    }
    planned.push(("min-memory".into(), "least peak reachable".into(), Ok(least)));
    for (name, plan) in plan_files {
        let r = session.report("plan file", plan.clone())?;
        planned.push(("plan file".into(), name.clone(), Ok(r)));
    }

    let base = run_steps(workload, &Plan::store_all(), device, 0)?;
    let mut rows = vec![BenchRow {
        strategy: "baseline".into(),
        setting: "store everything".into(),
        peak_bytes: baseline_peaks.requested_bytes,
        reserved_peak_bytes: baseline_peaks.reserved_bytes,
        measured_peak_bytes: base.peak_bytes(),
        step_ms: 0.0,
        step_ms_min: 0.0,
        step_ms_max: 0.0,
        overhead: 0.0,
        overhead_quartiles: (0.0, 0.0),
        predicted_overhead: 0.0,
        predicted_overhead_uncalibrated: uncalibrated.as_ref().map(|_| 0.0),
        planning_ms: 0.0,
        entries: 0,
        grads_identical: true,
        bit_identical: true,
        rejected: None,
    }];
    // The plans timed in turns: the baseline's, then each measured row's.
    let mut timed: Vec<Plan> = vec![Plan::store_all()];
    for (strategy, setting, r) in planned {
        let rejected = |rows: &mut Vec<BenchRow>, r: Option<&PlanReport>, why: String| {
            rows.push(BenchRow {
                strategy: strategy.clone(),
                setting: setting.clone(),
                peak_bytes: r.map_or(0, |r| r.planned_peak_bytes),
                reserved_peak_bytes: r.map_or(0, |r| r.planned_peaks.reserved_bytes),
                measured_peak_bytes: 0,
                step_ms: 0.0,
                step_ms_min: 0.0,
                step_ms_max: 0.0,
                overhead: 0.0,
                overhead_quartiles: (0.0, 0.0),
                predicted_overhead: r.map_or(0.0, |r| r.predicted_overhead),
                predicted_overhead_uncalibrated: r
                    .and_then(|r| uncalibrated.as_ref().map(|u| u.plan_overhead(&r.plan))),
                planning_ms: r.map_or(0.0, |r| r.planning_ms),
                entries: r.map_or(0, |r| r.plan.entries.len()),
                grads_identical: false,
                bit_identical: false,
                rejected: Some(why),
            })
        };
        let r = match r {
            Ok(r) => r,
            Err(why) => {
                rejected(&mut rows, None, why);
                continue;
            }
        };
        // Each candidate's first step runs on a fresh model (`run_steps` builds one), so a
        // rejected one leaves nothing behind.
        let run = match run_steps(workload, &r.plan, device, 0) {
            Ok(run) => run,
            Err(e) if e.is_out_of_memory() => {
                rejected(&mut rows, Some(&r), e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let check = PlanCheck::compare(
            &base.record,
            &run.record,
            r.planned_peak_bytes,
            plan_is_data_dependent(&r.plan),
        );
        rows.push(BenchRow {
            strategy: r.strategy.clone(),
            setting: setting.clone(),
            peak_bytes: r.planned_peak_bytes,
            reserved_peak_bytes: r.planned_peaks.reserved_bytes,
            measured_peak_bytes: run.peak_bytes(),
            step_ms: 0.0,
            step_ms_min: 0.0,
            step_ms_max: 0.0,
            overhead: 0.0,
            overhead_quartiles: (0.0, 0.0),
            predicted_overhead: r.predicted_overhead,
            predicted_overhead_uncalibrated: uncalibrated.as_ref().map(|u| u.plan_overhead(&r.plan)),
            planning_ms: r.planning_ms,
            entries: r.plan.entries.len(),
            grads_identical: !check.mismatches.iter().any(|m| m.quantity == Quantity::Gradient),
            bit_identical: check.bit_identical(),
            rejected: None,
        });
        timed.push(r.plan);
    }
    let reports = TimingProfiler::new(1, timed_steps.max(1)).profile_plans(workload, &timed, device)?;
    let base_ms = reports
        .first()
        .map(|r| r.step_samples_ms.clone())
        .unwrap_or_default();
    for (row, report) in rows.iter_mut().filter(|r| r.rejected.is_none()).zip(&reports) {
        let samples = &report.step_samples_ms;
        row.step_ms = report.step_ms;
        row.step_ms_min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        row.step_ms_max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let overheads: Vec<f64> = samples
            .iter()
            .zip(&base_ms)
            .map(|(p, b)| p / b.max(1e-9) - 1.0)
            .collect();
        row.overhead = median(&overheads);
        row.overhead_quartiles = quartiles(&overheads);
    }
    let largest_gap = OverheadGap::largest(&rows, |r| Some(r.predicted_overhead));
    let largest_gap_uncalibrated = uncalibrated
        .as_ref()
        .and_then(|_| OverheadGap::largest(&rows, |r| r.predicted_overhead_uncalibrated));
    Ok(BenchReport {
        model: selection.name().to_string(),
        batch: workload.batch_size,
        timesteps: selection.spec.time_steps,
        sample: selection.spec.sample.clone(),
        optimizer: workload.optimizer.name().to_string(),
        session_setup_ms,
        timed_steps,
        cost_model: source,
        rows,
        largest_gap,
        largest_gap_uncalibrated,
    })
}

impl BenchReport {
    /// The rows as a markdown table, then the largest gap between predicted and measured
    /// overhead.
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "| strategy | setting | peak | reduction | measured peak | step ms | overhead (measured) | overhead (predicted) | gap (points) | planning ms | entries | grads identical |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let base = self.rows.first().map_or(1, |r| r.peak_bytes).max(1);
        for r in &self.rows {
            if let Some(why) = &r.rejected {
                s.push_str(&format!(
                    "| {} | {} | rejected: {why} |||||||||||\n",
                    r.strategy, r.setting
                ));
                continue;
            }
            s.push_str(&format!(
                "| {} | {} | {} | {:.2}x | {} | {} | {:+.1}% | {:+.1}% | {:+.1} | {:.2} | {} | {} |\n",
                r.strategy,
                r.setting,
                bytes(r.peak_bytes),
                base as f64 / r.peak_bytes.max(1) as f64,
                if r.measured_peak_bytes == r.peak_bytes {
                    "= exact".to_string()
                } else {
                    bytes(r.measured_peak_bytes)
                },
                ms(r.step_ms),
                r.overhead * 100.0,
                r.predicted_overhead * 100.0,
                (r.predicted_overhead - r.overhead) * 100.0,
                r.planning_ms,
                r.entries,
                if r.grads_identical { "yes" } else { "NO" }
            ));
        }
        if let Some(g) = &self.largest_gap {
            s.push_str(&format!(
                "\nlargest gap between predicted and measured overhead: {}\n",
                g.describe()
            ));
        }
        s
    }
}

/// A step time with three significant decimals below 10 ms, one above.
pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}
