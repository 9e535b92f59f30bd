//! Chen et al.'s memory planning ("memonger", MXNet): keep the outputs of some layers and
//! recompute the layers between them, with the threshold found by the sqrt search.

use super::Strategy;
use super::groups::group_entries;
use crate::Result;
use crate::report::PlanReport;
use crate::session::PlanningSession;
use crate::sites::Layer;
use memopt_checkpoint::policy::PLAN_VERSION;
use memopt_checkpoint::{Plan, Policy};
use std::ops::Range;
use std::time::Instant;

/// Memonger: walking the layers in order and summing their output bytes, a layer whose running
/// sum exceeds the threshold keeps its output and starts a new segment; the layers of each
/// segment are recomputed together. The threshold comes from MXNet's `search_plan`: three
/// passes guessing `sqrt(saved × largest segment / 2)`, then a sweep up to `sqrt(2)` times the
/// last guess; the plan of least exact peak wins.
#[derive(Debug, Clone, Copy)]
pub struct Memonger {
    /// Sweep steps after the guesses (MXNet's `ntrial`).
    pub trials: usize,
    /// Policy of the recomputed segments (checkpoint with bit-packed spike inputs by default).
    pub policy: Policy,
}

impl Default for Memonger {
    fn default() -> Self {
        Memonger {
            trials: 6,
            policy: Policy::CHECKPOINT,
        }
    }
}

/// Segments and figures of one threshold: (groups, saved bytes, largest segment bytes).
fn mirror_plan(layers: &[Layer<'_>], threshold: u64) -> (Vec<Range<usize>>, u64, u64) {
    let (mut groups, mut start, mut local, mut saved, mut largest) = (Vec::new(), 0, 0u64, 0u64, 0u64);
    for (i, l) in layers.iter().enumerate() {
        let size = l.output_bytes();
        local += size;
        if local > threshold {
            saved += size;
            largest = largest.max(local);
            groups.push(start..i + 1);
            start = i + 1;
            local = 0;
        }
    }
    if start < layers.len() {
        largest = largest.max(local);
        groups.push(start..layers.len());
    }
    (groups, saved, largest)
}

impl Strategy for Memonger {
    fn name(&self) -> String {
        "memonger".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let root = session.sites().clone();
        let layers = root.layers();
        let mut history: Vec<(u64, u64, Plan)> = Vec::new();
        let mut evaluate = |session: &mut PlanningSession, threshold: u64| -> Result<(u64, u64)> {
            let (groups, saved, largest) = mirror_plan(&layers, threshold);
            let plan = Plan {
                update_in_backward: false,
                version: PLAN_VERSION,
                entries: group_entries(&layers, &groups, self.policy),
            };
            let peak = session.peak(&plan)?;
            history.push((peak, threshold, plan));
            Ok((saved, largest))
        };
        let (mut threshold, mut min_threshold) = (0u64, u64::MAX);
        for _ in 0..3 {
            let (saved, largest) = evaluate(session, threshold)?;
            min_threshold = min_threshold.min(largest);
            threshold = ((saved as f64 * largest as f64 / 2.0).sqrt()) as u64;
        }
        let max_threshold = (threshold as f64 * std::f64::consts::SQRT_2) as u64;
        let step = max_threshold.saturating_sub(min_threshold) / self.trials.max(1) as u64;
        if step > 0 {
            let mut t = min_threshold + step;
            for _ in 0..self.trials {
                evaluate(session, t)?;
                t += step;
            }
        }
        // Checkpointing nothing is a candidate too: memonger never returns a plan above the
        // baseline.
        history.push((session.baseline_peak_bytes(), u64::MAX, Plan::store_all()));
        history.sort_by_key(|(peak, threshold, _)| (*peak, *threshold));
        let plan = history.swap_remove(0).2;
        session.report_timed(&self.name(), plan, started, None)
    }
}
