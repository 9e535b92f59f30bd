//! The least peak whose predicted slowdown stays within a limit.

use super::{Strategy, least_exact_peak, least_of_kind, within_time};
use crate::report::{BudgetKind, PlanReport};
use crate::session::ExactCandidate;
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use std::time::Instant;

/// The plan of least exact peak of a kind (reserved by default: what runs out on a device)
/// whose predicted extra time is at most `max_overhead` of the baseline step (0.2 = at most 20%
/// slower): the Pareto front of the dynamic program, read at that time, each candidate that can
/// still win checked with a Meta step.
#[derive(Debug, Clone, Copy)]
pub struct MaxOverhead {
    /// Largest predicted slowdown, as a fraction of the baseline step time.
    pub max_overhead: f64,
    /// The peak minimised (ties: the requested peak, then the predicted time).
    pub minimise: BudgetKind,
}

impl MaxOverhead {
    /// At most `max_overhead` predicted slowdown (0.2 = 20%), minimising the reserved peak.
    pub fn new(max_overhead: f64) -> MaxOverhead {
        MaxOverhead {
            max_overhead,
            minimise: BudgetKind::Reserved,
        }
    }
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
            let candidates = within_time(session, limit_ms)?;
            least_of_kind(session, self.minimise, candidates)?
        } else {
            let kind = self.minimise;
            let front = session.exact_front()?;
            let within: Vec<ExactCandidate> =
                front.iter().filter(|c| c.extra_ms <= limit_ms).cloned().collect();
            least_exact_peak(&within, kind)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
