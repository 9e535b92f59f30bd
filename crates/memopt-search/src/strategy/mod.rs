//! Strategies: each turns a planning session into a verified plan.

mod budget;
mod fit;
mod groups;
mod max_overhead;
mod memonger;
mod min_memory;
mod pipeline;

pub use crate::report::BudgetKind;
pub use budget::{Budget, BudgetStrategy, parse_size};
pub use groups::{Block, Blocks, block_plan};
pub use max_overhead::MaxOverhead;
pub use memonger::Memonger;
pub use min_memory::MinMemory;
pub use pipeline::{Pipeline, Prefer, Profile};

use crate::report::PlanReport;
use crate::session::{ExactCandidate, PlanningSession};
use crate::{Result, SearchError};

/// A way to choose a plan. Every strategy's plan is verified by an exact Meta step before it is
/// reported.
///
/// To write one, read what you need from the session ([`PlanningSession::sites`],
/// [`Blocks::of`], [`PlanningSession::peak`] for the exact peak of a candidate in microseconds,
/// [`PlanningSession::overhead`] for its predicted slowdown), build a [`memopt_checkpoint::Plan`]
/// and hand it to [`PlanningSession::report`], which verifies it with a Meta step:
///
/// ```
/// use memopt_search::{Blocks, PlanReport, PlanningSession, Policy, Result, Strategy, Workload};
///
/// /// Checkpoints every other block, starting with the first.
/// struct EveryOtherBlock;
///
/// impl Strategy for EveryOtherBlock {
///     fn name(&self) -> String {
///         "every-other-block".into()
///     }
///     fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
///         let plan = Blocks::of(session.sites()).plan(|b| (b.index % 2 == 0).then_some(Policy::CHECKPOINT));
///         session.report(&self.name(), plan)
///     }
/// }
///
/// let mut session = PlanningSession::new(&Workload::zoo_small("cifar10dvs-vgg", 2)?)?;
/// let report = session.plan(&EveryOtherBlock)?;
/// assert!(report.planned_peak_bytes < report.baseline_peak_bytes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Strategy {
    /// Name for reports (`budget`, `min-memory`, `memonger`, `pipeline`).
    fn name(&self) -> String;
    /// Chooses a plan for the session's workload.
    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport>;
}

/// The plan of least predicted peak (ties: least time) among `solve`'s answers on each of the
/// session's chain models ([`PlanningSession::chains`]).
fn least_peak_over_chains<'s>(
    session: &'s PlanningSession,
    solve: impl Fn(&'s crate::chain::ChainModel) -> Result<crate::dp::Solution<'s>>,
) -> Result<memopt_checkpoint::Plan> {
    let mut best: Option<(u64, f64, memopt_checkpoint::Plan)> = None;
    for chain in session.chains() {
        let s = solve(chain)?;
        if best.as_ref().is_none_or(|b| (s.peak, s.extra_ms) < (b.0, b.1)) {
            let plan = memopt_checkpoint::Plan {
                update_in_backward: false,
                version: memopt_checkpoint::PLAN_VERSION,
                entries: crate::chain::plan_entries(&s.plan),
            };
            best = Some((s.peak, s.extra_ms, plan));
        }
    }
    best.map(|b| b.2)
        .ok_or_else(|| SearchError::Internal("the session has no chain model".into()))
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
