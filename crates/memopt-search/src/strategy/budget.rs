//! The plan of least predicted recomputation time whose exact peak fits a budget.

use super::Strategy;
use super::least_exact_peak;
use crate::chain::plan_entries;
use crate::dp::{least_time_within, min_peak};
use crate::report::{PlanReport, mib};
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use memopt_checkpoint::Plan;
use memopt_checkpoint::policy::PLAN_VERSION;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// An absolute budget, in bytes.
    Bytes(u64),
    /// A fraction of the baseline peak (0.5 = half).
    Fraction(f64),
}

impl Budget {
    /// The budget in bytes given the baseline peak.
    pub fn bytes(self, baseline: u64) -> Result<u64> {
        match self {
            Budget::Bytes(b) => Ok(b),
            Budget::Fraction(f) if f > 0.0 && f.is_finite() => Ok((baseline as f64 * f) as u64),
            Budget::Fraction(f) => Err(SearchError::InvalidSetting(format!(
                "a budget fraction must be positive, got {f}"
            ))),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = SearchError;
    /// Parses `2GiB`, `512MiB`, `300MB`, `1000000` (bytes) or `40%`.
    fn from_str(s: &str) -> Result<Budget> {
        let bad = || {
            SearchError::InvalidSetting(format!(
                "cannot read budget '{s}': use bytes with a unit (e.g. 2GiB, 512MiB, 300MB, 1000000) or a percentage of the baseline peak (e.g. 40%)"
            ))
        };
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let f: f64 = p.trim().parse().map_err(|_| bad())?;
            return Ok(Budget::Fraction(f / 100.0));
        }
        let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.trim().parse().map_err(|_| bad())?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            _ => return Err(bad()),
        };
        if !(value > 0.0 && value.is_finite()) {
            return Err(bad());
        }
        Ok(Budget::Bytes((value * scale) as u64))
    }
}

/// The optimal plan under a budget: a dynamic program over the chain of segments (each
/// stored, checkpointed with bit-packed spike inputs, chunked over time, split into its
/// children or grouped with its neighbours), exact because every segment's figures are
/// measured. An infeasible budget is an error that states the smallest reachable peak.
#[derive(Debug, Clone, Copy)]
pub struct BudgetStrategy {
    /// The budget.
    pub budget: Budget,
}

impl Strategy for BudgetStrategy {
    fn name(&self) -> String {
        "budget".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let limit = self.budget.bytes(session.baseline_peak_bytes())?;
        let plan = if session.chain_is_exact() {
            let chain = session.chain();
            match least_time_within(chain, limit) {
                Some(s) => Plan {
                    version: PLAN_VERSION,
                    entries: plan_entries(&s.plan),
                },
                None => {
                    let best = min_peak(chain);
                    return Err(SearchError::Infeasible {
                        budget: limit,
                        best: best.peak,
                        best_plan_entries: plan_entries(&best.plan).len(),
                    });
                }
            }
        } else {
            let front = session.exact_front()?;
            let fitting = front
                .iter()
                .filter(|c| c.peak <= limit)
                .min_by(|a, b| a.extra_ms.total_cmp(&b.extra_ms).then(a.peak.cmp(&b.peak)));
            match fitting {
                Some(c) => c.plan.clone(),
                None => {
                    let best = least_exact_peak(front)?;
                    return Err(SearchError::Infeasible {
                        budget: limit,
                        best: best.peak,
                        best_plan_entries: best.plan.entries.len(),
                    });
                }
            }
        };
        let report = session.report(&self.name(), plan, started, None)?;
        if report.planned_peak_bytes > limit {
            return Err(SearchError::Internal(format!(
                "the chosen plan peaks at {} over the budget {}",
                mib(report.planned_peak_bytes),
                mib(limit)
            )));
        }
        Ok(report)
    }
}
