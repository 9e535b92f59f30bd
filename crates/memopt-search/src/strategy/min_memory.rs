//! The least peak reachable, and the cheapest plan that reaches it.

use super::{Strategy, least_exact_peak, least_peak_over_chains};
use crate::Result;
use crate::dp::min_peak;
use crate::report::PlanReport;
use crate::session::PlanningSession;
use std::time::Instant;

/// The plan of least peak over the whole plan space (ties: least predicted time).
#[derive(Debug, Clone, Copy, Default)]
pub struct MinMemory;

impl Strategy for MinMemory {
    fn name(&self) -> String {
        "min-memory".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let plan = if session.chain_is_exact() {
            least_peak_over_chains(session, min_peak)?
        } else {
            least_exact_peak(session.exact_front()?)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
