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
use memopt_checkpoint::Plan;

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

/// Plans of the session's chain models ([`PlanningSession::chains`]) on their Pareto fronts whose
/// predicted extra time is at most `limit_ms`, by increasing requested peak (exact: the chain
/// model's), then time; each with its requested peak in bytes and its extra time in ms.
fn within_time(session: &PlanningSession, limit_ms: f64) -> Result<Vec<(u64, f64, Plan)>> {
    let mut out = Vec::new();
    for chain in session.chains() {
        for s in crate::dp::pareto_front(chain)? {
            if s.extra_ms <= limit_ms {
                out.push((s.peak, s.extra_ms, crate::chain::plan_of(&s.plan)));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    out.dedup_by(|a, b| a.2 == b.2);
    Ok(out)
}

/// The candidate (requested peak, extra ms, plan; by increasing requested peak) of least exact
/// peak of `kind` (ties: requested peak, then time). For the requested peak that is the first;
/// otherwise each is checked with a Meta step, until the requested peaks reach the best peak
/// found: no plan's allocated or reserved peak is below its requested one, so none after can
/// win.
fn least_of_kind(
    session: &mut PlanningSession,
    kind: BudgetKind,
    candidates: Vec<(u64, f64, Plan)>,
) -> Result<Plan> {
    let no_plan = || SearchError::Internal("the chain models propose no plan".into());
    if kind == BudgetKind::Requested {
        return candidates.into_iter().next().map(|c| c.2).ok_or_else(no_plan);
    }
    let mut best: Option<((u64, u64, f64), Plan)> = None;
    for (requested, extra_ms, plan) in candidates {
        if best.as_ref().is_some_and(|(b, _)| requested >= b.0) {
            break;
        }
        let key = (kind.of(&session.exact_peaks(&plan)?), requested, extra_ms);
        let better = |b: &(u64, u64, f64)| {
            (key.0, key.1)
                .cmp(&(b.0, b.1))
                .then(key.2.total_cmp(&b.2))
                .is_lt()
        };
        if best.as_ref().is_none_or(|(b, _)| better(b)) {
            best = Some((key, plan));
        }
    }
    best.map(|b| b.1).ok_or_else(no_plan)
}

/// The candidate of least exact peak of `kind` (ties: requested peak, then least predicted
/// time).
fn least_exact_peak(front: &[ExactCandidate], kind: BudgetKind) -> Result<&ExactCandidate> {
    front
        .iter()
        .min_by(|a, b| {
            (kind.of(&a.peaks), a.peak)
                .cmp(&(kind.of(&b.peaks), b.peak))
                .then(a.extra_ms.total_cmp(&b.extra_ms))
        })
        .ok_or_else(|| {
            SearchError::Internal("the exact front holds no plan, not even storing everything".into())
        })
}
