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
    /// Parses a positive size: `2GiB`, `512MiB`, `300MB`, `1e9` or `1000000` (bytes), or a
    /// positive percentage of the baseline peak, `40%`.
    fn from_str(s: &str) -> Result<Budget> {
        let bad = || {
            SearchError::InvalidSetting(format!(
                "cannot read budget '{s}': use a positive size in bytes, with or without a unit (e.g. 2GiB, 512MiB, 300MB, 1e9), or a positive percentage of the baseline peak (e.g. 40%)"
            ))
        };
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let f: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(f > 0.0 && f.is_finite()) {
                return Err(bad());
            }
            return Ok(Budget::Fraction(f / 100.0));
        }
        // The unit is the trailing run of letters, so that exponents (`1e9`) stay in the number.
        let num = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &t[num.len()..];
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
        let bytes = value * scale;
        if !(bytes >= 1.0 && bytes.is_finite()) {
            return Err(bad());
        }
        Ok(Budget::Bytes(bytes as u64))
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
        let report = session.report_timed(&self.name(), plan, started, None)?;
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

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn budgets_parse_sizes_and_percentages() {
        let ok = [
            ("2GiB", Budget::Bytes(2 << 30)),
            ("512 MiB", Budget::Bytes(512 << 20)),
            ("300MB", Budget::Bytes(300_000_000)),
            ("1e9", Budget::Bytes(1_000_000_000)),
            ("1.5e3KiB", Budget::Bytes(1_536_000)),
            ("1000000", Budget::Bytes(1_000_000)),
            ("40%", Budget::Fraction(0.4)),
            ("150%", Budget::Fraction(1.5)),
        ];
        for (text, budget) in ok {
            assert_eq!(text.parse::<Budget>().unwrap(), budget, "{text}");
        }
    }

    #[test]
    fn budgets_that_are_not_positive_sizes_are_rejected() {
        for text in [
            "-5GiB", "0", "0%", "-40%", "0.1", "NaN%", "inf", "5e", "2 GiBs", "", "lots",
        ] {
            let msg = text.parse::<Budget>().unwrap_err().to_string();
            assert!(
                msg.contains(&format!("'{text}'")) && msg.contains("positive size") && msg.contains("40%"),
                "{text}: {msg}"
            );
        }
    }
}
