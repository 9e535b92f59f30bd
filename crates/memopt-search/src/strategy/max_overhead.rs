//! The least peak whose predicted slowdown stays within a limit.

use super::{Strategy, least_exact_peak};
use crate::chain::plan_entries;
use crate::dp::min_peak_within_time;
use crate::report::PlanReport;
use crate::session::ExactCandidate;
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use memopt_checkpoint::Plan;
use memopt_checkpoint::policy::PLAN_VERSION;
use std::time::Instant;

/// The plan of least exact peak whose predicted extra time is at most `max_overhead` of the
/// baseline step (0.2 = at most 20% slower): the Pareto front of the dynamic program, read at
/// that time.
#[derive(Debug, Clone, Copy)]
pub struct MaxOverhead {
    /// Largest predicted slowdown, as a fraction of the baseline step time.
    pub max_overhead: f64,
}

impl Strategy for MaxOverhead {
    fn name(&self) -> String {
        "max-overhead".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        if !(self.max_overhead >= 0.0 && self.max_overhead.is_finite()) {
            return Err(SearchError::InvalidSetting(format!(
                "the overhead limit must be a fraction >= 0 (0.2 = 20%), got {}",
                self.max_overhead
            )));
        }
        let started = Instant::now();
        let limit_ms = self.max_overhead * session.cost().baseline_step_ms();
        let plan = if session.chain_is_exact() {
            // The least peak within the limit over the session's chain models (ties: faster).
            let mut best: Option<(u64, f64, Plan)> = None;
            for chain in session.chains() {
                let s = min_peak_within_time(chain, limit_ms)?;
                if best.as_ref().is_none_or(|b| (s.peak, s.extra_ms) < (b.0, b.1)) {
                    let entries = plan_entries(&s.plan);
                    best = Some((
                        s.peak,
                        s.extra_ms,
                        Plan {
                            version: PLAN_VERSION,
                            entries,
                        },
                    ));
                }
            }
            best.map(|b| b.2)
                .ok_or_else(|| SearchError::Internal("the session has no chain model".into()))?
        } else {
            let front = session.exact_front()?;
            let within: Vec<ExactCandidate> =
                front.iter().filter(|c| c.extra_ms <= limit_ms).cloned().collect();
            least_exact_peak(&within)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
