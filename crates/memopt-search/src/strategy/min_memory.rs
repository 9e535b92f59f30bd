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
            // The least peak over the session's chain models (ties: the faster plan).
            let mut best: Option<(u64, f64, Plan)> = None;
            for chain in session.chains() {
                let s = min_peak(chain)?;
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
                .ok_or_else(|| crate::SearchError::Internal("the session has no chain model".into()))?
        } else {
            least_exact_peak(session.exact_front()?)?.plan.clone()
        };
        session.report_timed(&self.name(), plan, started, None)
    }
}
