//! Strategies: each turns a planning session into a verified plan.

mod budget;
mod groups;
mod max_overhead;
mod memonger;
mod min_memory;
mod pipeline;

pub use budget::{Budget, BudgetStrategy, parse_size};
pub use groups::block_plan;
pub use max_overhead::MaxOverhead;
pub use memonger::Memonger;
pub use min_memory::MinMemory;
pub use pipeline::{Pipeline, Prefer, Profile};

use crate::report::PlanReport;
use crate::session::{ExactCandidate, PlanningSession};
use crate::{Result, SearchError};

/// A way to choose a plan. Every strategy's plan is verified by an exact Meta step before it is
/// reported.
pub trait Strategy {
    /// Name for reports (`budget`, `min-memory`, `memonger`, `pipeline`).
    fn name(&self) -> String;
    /// Chooses a plan for the session's workload.
    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport>;
}

/// The candidate of least exact peak (ties: least predicted time).
fn least_exact_peak(front: &[ExactCandidate]) -> Result<&ExactCandidate> {
    front
        .iter()
        .min_by(|a, b| a.peak.cmp(&b.peak).then(a.extra_ms.total_cmp(&b.extra_ms)))
        .ok_or_else(|| {
            SearchError::Internal("the exact front holds no plan, not even storing everything".into())
        })
}
