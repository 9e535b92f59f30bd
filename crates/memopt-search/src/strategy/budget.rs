//! The plan of least predicted recomputation time whose exact (reserved) peak fits a budget.

use super::Strategy;
use super::fit::fastest_fitting;
use crate::report::BudgetKind;
use crate::report::{BudgetFit, PlanReport, mib};
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// An absolute budget, in bytes.
    Bytes(u64),
    /// A fraction of the baseline's peak of the budget's kind (0.5 = half).
    Fraction(f64),
}

impl Budget {
    /// The budget in bytes given the baseline peak (of the kind the budget bounds), in bytes.
    pub fn bytes(self, baseline: u64) -> Result<u64> {
        match self {
            Budget::Bytes(b) => Ok(b),
            Budget::Fraction(f) if f > 0.0 && f.is_finite() => {
                let b = baseline as f64 * f;
                if b >= 18_446_744_073_709_551_616.0 {
                    return Err(SearchError::InvalidSetting(format!(
                        "a budget of {} times the baseline peak is beyond the largest representable size, {} bytes",
                        f,
                        u64::MAX
                    )));
                }
                Ok(b as u64)
            }
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
                "cannot read budget '{s}': use a positive size in bytes, with or without a unit (e.g. 2GiB, 512MiB, 300MB, 1.5TiB, 1e9), or a positive percentage of the baseline peak (e.g. 40%)"
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
        parse_size(t).map(Budget::Bytes).map_err(|why| {
            SearchError::InvalidSetting(format!(
                "cannot read budget '{s}': {why}; use a positive size in bytes, with or without a unit (e.g. 2GiB, 512MiB, 300MB, 1.5TiB, 1e9), or a positive percentage of the baseline peak (e.g. 40%)"
            ))
        })
    }
}

/// Parses a positive size in bytes: a number (`1000000`, `1e9`, `1.5`) with an optional unit,
/// B, kB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024), case-insensitive.
/// Sizes below one byte and sizes beyond `u64::MAX` bytes are errors (never capped); the
/// error says why, without the input.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    // The unit is the trailing run of letters, so that exponents (`1e9`) stay in the number.
    let num = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &t[num.len()..];
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    // Plain integers are exact to the byte, even above 2^53.
    if scale == 1.0
        && let Ok(n) = num.trim().parse::<u64>()
    {
        return if n >= 1 {
            Ok(n)
        } else {
            Err("the size must be positive".into())
        };
    }
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{}' is not a number", num.trim()))?;
    let bytes = value * scale;
    if bytes.is_nan() || bytes < 1.0 {
        return Err("the size must be positive, at least 1 byte".into());
    }
    // 2^64 as f64: anything at or above it does not fit in u64 (the cast would cap it).
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(format!(
            "the size is beyond the largest representable, {} bytes",
            u64::MAX
        ));
    }
    Ok(bytes as u64)
}

/// The fastest plan under a budget on the reserved peak (or the allocated one, see
/// [`BudgetKind`]): a dynamic program over the chain of segments (each stored, checkpointed
/// with bit-packed spike inputs, chunked over time, split into its children or grouped with
/// its neighbours) proposes plans on requested bytes, exact because every segment's figures
/// are measured, and a Meta step checks each proposal's reserved peak until one fits (see
/// `fastest_fitting`). An infeasible budget is an error that states the smallest peak
/// found.
#[derive(Debug, Clone, Copy)]
pub struct BudgetStrategy {
    /// The budget.
    pub budget: Budget,
    /// The peak it bounds (reserved by default).
    pub kind: BudgetKind,
}

impl BudgetStrategy {
    /// A budget on the reserved peak.
    pub fn reserved(budget: Budget) -> Self {
        BudgetStrategy {
            budget,
            kind: BudgetKind::Reserved,
        }
    }
}

impl Strategy for BudgetStrategy {
    fn name(&self) -> String {
        "budget".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let limit = self.budget.bytes(self.kind.of(&session.baseline_peaks()))?;
        let (plan, fitted, checked) = if session.chain_is_exact() {
            let (plan, fitted, checked) = fastest_fitting(session, self.kind, limit)?;
            (plan, Some(fitted), checked)
        } else {
            let kind = self.kind;
            let front = session.exact_front()?;
            let fitting = front
                .iter()
                .filter(|c| kind.of(&c.peaks) <= limit)
                .min_by(|a, b| a.extra_ms.total_cmp(&b.extra_ms).then(a.peak.cmp(&b.peak)));
            match fitting {
                Some(c) => (c.plan.clone(), None, front.len()),
                None => {
                    let best = front
                        .iter()
                        .min_by_key(|c| kind.of(&c.peaks))
                        .ok_or_else(|| SearchError::Internal("the exact front holds no plan".into()))?;
                    return Err(SearchError::Infeasible {
                        budget: limit,
                        kind,
                        best: kind.of(&best.peaks),
                        best_plan_entries: best.plan.entries.len(),
                    });
                }
            }
        };
        let mut report = session.report_timed(&self.name(), plan, started, None)?;
        let mut unbounded_reserved_bytes = None;
        if let Some(fitted) = fitted
            && self.kind.of(&report.planned_peaks) > limit
        {
            // It fits because the allocator releases its cache at the budget: report the
            // peaks under the limit, and the unbounded reserved peak beside them.
            unbounded_reserved_bytes = Some(report.planned_peaks.reserved_bytes);
            report.planned_peaks = fitted;
        }
        let peak = self.kind.of(&report.planned_peaks);
        if peak > limit {
            return Err(SearchError::Internal(format!(
                "the chosen plan's {} peak {} is over the budget {}",
                self.kind,
                mib(peak),
                mib(limit)
            )));
        }
        report.budget = Some(BudgetFit {
            bytes: limit,
            kind: self.kind,
            candidates_checked: checked,
            unbounded_reserved_bytes,
        });
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
            ("2TiB", Budget::Bytes(2 << 40)),
            ("3 TB", Budget::Bytes(3_000_000_000_000)),
            ("18446744073709551615", Budget::Bytes(u64::MAX)),
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

    #[test]
    fn budgets_beyond_u64_are_errors_not_capped() {
        for text in [
            "1e30",
            "20000000TiB",
            "18446744073709551616",
            "99999999999999999999",
        ] {
            let msg = text.parse::<Budget>().unwrap_err().to_string();
            assert!(msg.contains("largest representable"), "{text}: {msg}");
        }
    }
}
