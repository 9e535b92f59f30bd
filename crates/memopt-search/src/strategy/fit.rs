//! Which peak a budget bounds, and the search for the fastest plan whose exact peak of that
//! kind fits: the chain model proposes plans on requested bytes (exact, and never above the
//! allocated or reserved bytes), a Meta step checks each proposal's peak of the budget's kind.

use crate::chain::plan_entries;
use crate::dp::{least_time_within, min_peak};
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use memopt_checkpoint::Plan;
use memopt_checkpoint::policy::PLAN_VERSION;
use memopt_profiler::AllocatorLevels;
use serde::{Deserialize, Serialize};

/// The peak a budget bounds: one of the caching allocator's levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Bytes of the segments the allocator holds from the device (allocated blocks, cached
    /// free blocks and split remainders): what runs out on a device. The default.
    #[default]
    Reserved,
    /// Bytes of the blocks handed to tensors: each request rounded up to 512 B, and a cached
    /// block reused whole when less than 1 MiB (large pool) or 512 B (small pool) would remain.
    Allocated,
}

impl BudgetKind {
    /// The peak of this kind among `levels`, in bytes.
    pub fn of(self, levels: &AllocatorLevels) -> u64 {
        match self {
            BudgetKind::Reserved => levels.reserved_bytes,
            BudgetKind::Allocated => levels.allocated_bytes,
        }
    }

    /// The CLI spelling: `reserved` or `allocated`.
    pub fn label(self) -> &'static str {
        match self {
            BudgetKind::Reserved => "reserved",
            BudgetKind::Allocated => "allocated",
        }
    }
}

impl std::fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Candidates tried one by one, each the fastest plan strictly below the previous one's
/// requested peak, before the search steps down by the whole overshoot at once.
const ONE_BY_ONE: usize = 16;

/// The fastest plan the chain model proposes whose exact peak of `kind` (a Meta step) is at
/// most `limit` bytes, with its exact peaks and the number of candidates checked.
///
/// Reserved bytes are never below allocated ones, nor allocated below requested ones, so
/// only plans whose requested peak (the chain model's exact figure) fits can fit. The search
/// starts with the fastest of those; while the chosen plan's peak of `kind` is over the limit
/// (rounding, unsplit blocks, whole segments), it tightens the requested target to just below
/// that plan's peak and takes the next candidate on the chain's front, or, after
/// [`ONE_BY_ONE`] candidates, to that peak minus the overshoot. When
/// no plan is left below the target it checks the least-peak plan, and fails with
/// [`SearchError::Infeasible`], naming the least peak of `kind` it saw, when that does not
/// fit either.
pub(crate) fn fastest_fitting(
    session: &mut PlanningSession,
    kind: BudgetKind,
    limit: u64,
) -> Result<(Plan, AllocatorLevels, usize)> {
    let mut target = limit;
    let mut checked = 0usize;
    let mut least: Option<(u64, usize)> = None;
    loop {
        let candidate = least_time_within(session.chain(), target)?.map(|s| (s.peak, plan_of(&s.plan)));
        let Some((requested, plan)) = candidate else {
            // Nothing left below the target: the least-peak plan is the best there is.
            let best = plan_of(&min_peak(session.chain())?.plan);
            let peaks = session.exact_peaks(&best)?;
            checked += 1;
            if kind.of(&peaks) <= limit {
                // A step down by the overshoot can pass it by: the least-peak plan fits.
                return Ok((best, peaks, checked));
            }
            let (peak, entries) = match least {
                Some((p, n)) if p < kind.of(&peaks) => (p, n),
                _ => (kind.of(&peaks), best.entries.len()),
            };
            return Err(SearchError::Infeasible {
                budget: limit,
                kind,
                best: peak,
                best_plan_entries: entries,
            });
        };
        let peaks = session.exact_peaks(&plan)?;
        checked += 1;
        let peak = kind.of(&peaks);
        if peak <= limit {
            return Ok((plan, peaks, checked));
        }
        if least.is_none_or(|(p, _)| peak < p) {
            least = Some((peak, plan.entries.len()));
        }
        let below = requested.min(target);
        target = if checked < ONE_BY_ONE {
            below.checked_sub(1)
        } else {
            below.checked_sub(peak - limit)
        }
        .unwrap_or(0);
    }
}

fn plan_of(chosen: &[crate::chain::Chosen<'_>]) -> Plan {
    Plan {
        version: PLAN_VERSION,
        entries: plan_entries(chosen),
    }
}
