//! Every strategy side by side for one workload: exact peak, measured CPU peak and step time,
//! measured and predicted overhead, planning time. Shared by `memopt bench` and the whole-model
//! tables of `cargo xtask bench`.

use crate::calibration::CalibrationArgs;
use crate::error::Result;
use crate::format::bytes;
use crate::selection::Selection;
use crate::steps::run_steps;
use crate::strategy::explain;
use memopt_checkpoint::Plan;
use memopt_core::Device;
use memopt_profiler::{PlanCheck, Quantity, plan_is_data_dependent};
use memopt_search::{
    Budget, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, PlanReport, Strategy,
};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One strategy's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// `baseline` (store everything), `pipeline`, `memonger`, `budget`, `max-overhead` or
    /// `min-memory`.
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
    /// Median wall time of a CPU step, in ms.
    pub step_ms: f64,
    /// Fastest timed step, in ms.
    pub step_ms_min: f64,
    /// Slowest timed step, in ms.
    pub step_ms_max: f64,
    /// Measured extra time over the baseline step, as a fraction (0.18 = 18% slower).
    pub overhead: f64,
    /// The cost model's predicted extra time, as a fraction.
    pub predicted_overhead: f64,
    /// Time the strategy took, in ms (the planning session's setup excluded).
    pub planning_ms: f64,
    /// Entries of the plan.
    pub entries: usize,
    /// Whether the first step's gradients are bit-identical to the baseline's.
    pub grads_identical: bool,
    /// Whether everything the first step produced (loss, gradients, running statistics, neuron
    /// states, updated parameters) is bit-identical to the baseline's.
    pub bit_identical: bool,
    /// Why the candidate was rejected when its real steps ran out of device memory (then the
    /// measured figures are 0 and nothing was compared); absent for a measured row.
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
    /// CPU steps timed per row (after one untimed step).
    pub timed_steps: usize,
    /// One row per strategy, the baseline first.
    pub rows: Vec<BenchRow>,
}

/// Plans with every strategy and measures each plan with real steps on `device` (the CPU or a
/// GPU): one step for the peak and the gradients, then `timed_steps` timed ones. The budget row
/// asks for the reserved peak midway between the min-memory plan's and the baseline's (always
/// feasible: the budget search ends with the min-memory plan) unless `budget` is given. A
/// candidate whose steps run out of device memory is rejected (its row says why) and the others
/// are still measured; the baseline must fit.
pub fn bench(
    selection: &Selection,
    timed_steps: usize,
    budget: Option<Budget>,
    device: Device,
    calibration: &CalibrationArgs,
) -> Result<BenchReport> {
    let workload = &selection.workload;
    let started = Instant::now();
    let mut session = calibration.session(workload, device)?;
    let session_setup_ms = started.elapsed().as_secs_f64() * 1e3;
    let baseline_peaks = session.baseline_peaks();
    let least = MinMemory.plan(&mut session)?;
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
        (
            Box::new(MaxOverhead { max_overhead: 0.2 }),
            "at most 20% predicted".into(),
        ),
    ];
    let mut reports: Vec<(PlanReport, String)> = Vec::new();
    for (s, setting) in planners {
        reports.push((s.plan(&mut session).map_err(explain)?, setting));
    }
    reports.push((least, "least peak reachable".into()));

    let base = run_steps(workload, &Plan::store_all(), device, timed_steps)?;
    let base_ms = base.median_step_ms();
    let (base_min, base_max) = base.step_ms_range();
    let mut rows = vec![BenchRow {
        strategy: "baseline".into(),
        setting: "store everything".into(),
        peak_bytes: baseline_peaks.requested_bytes,
        reserved_peak_bytes: baseline_peaks.reserved_bytes,
        measured_peak_bytes: base.peak_bytes(),
        step_ms: base_ms,
        step_ms_min: base_min,
        step_ms_max: base_max,
        overhead: 0.0,
        predicted_overhead: 0.0,
        planning_ms: 0.0,
        entries: 0,
        grads_identical: true,
        bit_identical: true,
        rejected: None,
    }];
    for (r, setting) in reports {
        // Each candidate runs on a fresh model (`run_steps` builds one), so a rejected one
        // leaves nothing behind.
        let run = match run_steps(workload, &r.plan, device, timed_steps) {
            Ok(run) => run,
            Err(e) if e.is_out_of_memory() => {
                rows.push(BenchRow {
                    strategy: r.strategy.clone(),
                    setting,
                    peak_bytes: r.planned_peak_bytes,
                    reserved_peak_bytes: r.planned_peaks.reserved_bytes,
                    measured_peak_bytes: 0,
                    step_ms: 0.0,
                    step_ms_min: 0.0,
                    step_ms_max: 0.0,
                    overhead: 0.0,
                    predicted_overhead: r.predicted_overhead,
                    planning_ms: r.planning_ms,
                    entries: r.plan.entries.len(),
                    grads_identical: false,
                    bit_identical: false,
                    rejected: Some(e.to_string()),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        let ms = run.median_step_ms();
        let (min, max) = run.step_ms_range();
        let check = PlanCheck::compare(
            &base.record,
            &run.record,
            r.planned_peak_bytes,
            plan_is_data_dependent(&r.plan),
        );
        rows.push(BenchRow {
            strategy: r.strategy.clone(),
            setting,
            peak_bytes: r.planned_peak_bytes,
            reserved_peak_bytes: r.planned_peaks.reserved_bytes,
            measured_peak_bytes: run.peak_bytes(),
            step_ms: ms,
            step_ms_min: min,
            step_ms_max: max,
            overhead: ms / base_ms.max(1e-9) - 1.0,
            predicted_overhead: r.predicted_overhead,
            planning_ms: r.planning_ms,
            entries: r.plan.entries.len(),
            grads_identical: !check.mismatches.iter().any(|m| m.quantity == Quantity::Gradient),
            bit_identical: check.bit_identical(),
            rejected: None,
        });
    }
    Ok(BenchReport {
        model: selection.name().to_string(),
        batch: workload.batch_size,
        timesteps: selection.spec.time_steps,
        sample: selection.spec.sample.clone(),
        optimizer: workload.optimizer.name().to_string(),
        session_setup_ms,
        timed_steps,
        rows,
    })
}

impl BenchReport {
    /// The rows as a markdown table.
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "| strategy | setting | peak | reduction | measured peak | step ms | overhead (measured) | overhead (predicted) | planning ms | entries | grads identical |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let base = self.rows.first().map_or(1, |r| r.peak_bytes).max(1);
        for r in &self.rows {
            s.push_str(&format!(
                "| {} | {} | {} | {:.2}x | {} | {} | {:+.1}% | {:+.1}% | {:.2} | {} | {} |\n",
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
                r.planning_ms,
                r.entries,
                if r.grads_identical { "yes" } else { "NO" }
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
