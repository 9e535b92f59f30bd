//! The least peak reachable, and the cheapest plan that reaches it.

use super::{Strategy, least_exact_peak};
use crate::Result;
use crate::chain::plan_entries;
use crate::dp::min_peak;
use crate::report::PlanReport;
use crate::session::PlanningSession;
use memopt_checkpoint::Plan;
use memopt_checkpoint::policy::PLAN_VERSION;
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
            let best = min_peak(session.chain())?;
            Plan {
                version: PLAN_VERSION,
                entries: plan_entries(&best.plan),
            }
        } else {
            least_exact_peak(session.exact_front()?)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
