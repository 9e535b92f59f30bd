//! The least peak reachable, and the cheapest plan that reaches it.

use super::{Strategy, least_exact_peak, least_of_kind, within_time};
use crate::Result;
use crate::report::{BudgetKind, PlanReport};
use crate::session::PlanningSession;
use std::time::Instant;

/// The plan of least exact peak of a kind (reserved by default) over the whole plan space
/// (ties: the requested peak, then the least predicted time).
#[derive(Debug, Clone, Copy, Default)]
pub struct MinMemory {
    /// The peak minimised.
    pub minimise: BudgetKind,
}

impl Strategy for MinMemory {
    fn name(&self) -> String {
        "min-memory".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let plan = if session.chain_is_exact() {
            let candidates = within_time(session, f64::INFINITY)?;
            least_of_kind(session, self.minimise, candidates)?
        } else {
            let kind = self.minimise;
            least_exact_peak(session.exact_front()?, kind)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
