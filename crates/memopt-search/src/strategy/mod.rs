//! Strategies: each turns a planning session into a verified plan.

mod budget;
mod groups;
mod max_overhead;
mod memonger;
mod min_memory;
mod pipeline;

pub use budget::{Budget, BudgetStrategy};
pub use groups::block_plan;
pub use max_overhead::MaxOverhead;
pub use memonger::Memonger;
pub use min_memory::MinMemory;
pub use pipeline::{Pipeline, Prefer, Profile};

use crate::Result;
use crate::report::PlanReport;
use crate::session::PlanningSession;

/// A way to choose a plan. Every strategy's plan is verified by an exact Meta step before it is
/// reported.
pub trait Strategy {
    /// Name for reports (`budget`, `min-memory`, `memonger`, `pipeline`).
    fn name(&self) -> String;
    /// Chooses a plan for the session's workload.
    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport>;
}
