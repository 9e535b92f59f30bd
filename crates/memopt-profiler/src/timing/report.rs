//! The timing report: per-module wall time, median over runs.

use crate::Result;
use crate::error::ProfilerError;
use crate::format::path;
use memopt_checkpoint::Plan;
use memopt_core::{Device, Phase};
use serde::{Deserialize, Serialize};
use std::fmt::{self, Write};

/// Wall time of one module in one phase. A parent's time includes its children's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleTiming {
    /// Module path (`""` for the root).
    pub path: String,
    /// Module type (empty when unknown).
    pub module_type: String,
    /// Forward, backward, recompute or optimizer.
    pub phase: Phase,
    /// Separate stretches of time spent in it per run (calls, chunks, backward nodes).
    pub visits: u64,
    /// Median over the measured runs, in milliseconds.
    pub median_ms: f64,
    /// Fastest run, in milliseconds.
    pub min_ms: f64,
    /// Slowest run, in milliseconds.
    pub max_ms: f64,
    /// Every measured run, in milliseconds, in run order.
    pub samples_ms: Vec<f64>,
}

/// Per-module forward, backward and recompute wall time of a step. On the CPU the clock is the
/// wall clock around each scope; a GPU backend will time with CUDA events instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingReport {
    /// What was run.
    pub workload: String,
    /// Device.
    pub device: Device,
    /// The plan in force.
    pub plan: Plan,
    /// Runs discarded before measuring.
    pub warmup_runs: usize,
    /// Runs measured.
    pub runs: usize,
    /// Median time of a whole step, in milliseconds.
    pub step_ms: f64,
    /// Every measured step, in milliseconds.
    pub step_samples_ms: Vec<f64>,
    /// Per module and phase (setup excluded), in order of first appearance.
    pub modules: Vec<ModuleTiming>,
}

impl TimingReport {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        // Plain numbers, strings and vectors: serialisation cannot fail (non-finite floats are
        // written as null).
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses a report written by [`TimingReport::to_json`].
    pub fn from_json(s: &str) -> Result<TimingReport> {
        serde_json::from_str(s).map_err(|e| ProfilerError::Invalid(format!("not a timing report: {e}")))
    }

    /// The timing of `path` in `phase`.
    pub fn module(&self, path: &str, phase: Phase) -> Option<&ModuleTiming> {
        self.modules.iter().find(|m| m.path == path && m.phase == phase)
    }

    /// Median milliseconds of `path` in `phase`, 0 when it never ran.
    pub fn median_ms(&self, path: &str, phase: Phase) -> f64 {
        self.module(path, phase).map_or(0.0, |m| m.median_ms)
    }

    /// The report as a text table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        // Writing to a String never fails.
        let _ = self.write_table(&mut s);
        s
    }

    fn write_table(&self, s: &mut String) -> fmt::Result {
        writeln!(
            s,
            "time of one step: {} on {} (plan: {}), median of {} after {} warm-up: {:.3} ms",
            self.workload,
            self.device,
            crate::format::count(self.plan.entries.len(), "entry", "entries"),
            crate::format::count(self.runs, "run", "runs"),
            self.warmup_runs,
            self.step_ms
        )?;
        writeln!(
            s,
            "  {:<32} {:<18} {:<10} {:>6} {:>11} {:>11} {:>11}",
            "module", "type", "phase", "visits", "median ms", "min ms", "max ms"
        )?;
        for m in &self.modules {
            writeln!(
                s,
                "  {:<32} {:<18} {:<10} {:>6} {:>11.3} {:>11.3} {:>11.3}",
                path(&m.path),
                m.module_type,
                m.phase.name(),
                m.visits,
                m.median_ms,
                m.min_ms,
                m.max_ms
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for TimingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}

pub use memopt_core::stats::median;

/// The lower and upper quartiles of `v` (Tukey's hinges: the medians of the lower and upper
/// halves, the middle value in both for an odd count); (0, 0) for none. With the median they
/// say how far the middle half of the samples spreads, which is what separates a difference
/// of medians from noise.
pub fn quartiles(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let half = s.len().div_ceil(2);
    (median(&s[..half]), median(&s[s.len() - half..]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(super::median(&[]), 0.0);
    }

    #[test]
    fn quartiles_are_the_medians_of_the_halves() {
        assert_eq!(super::quartiles(&[5.0, 1.0, 3.0, 2.0, 4.0]), (2.0, 4.0));
        assert_eq!(super::quartiles(&[4.0, 1.0, 3.0, 2.0]), (1.5, 3.5));
        assert_eq!(super::quartiles(&[7.0]), (7.0, 7.0));
        assert_eq!(super::quartiles(&[]), (0.0, 0.0));
    }
}
