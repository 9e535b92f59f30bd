//! Which peak a budget bounds, and the search for the fastest plan whose exact peak of that
//! kind fits: the chain model proposes plans on requested bytes (exact, and never above the
//! allocated or reserved bytes), a Meta step checks each proposal's peak of the budget's kind.

use crate::chain::plan_entries;
use crate::dp::FastestWithin;
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
/// most `limit` bytes, with its exact peaks and the number of candidates checked. A reserved
/// budget is the memory of a device: a plan also fits when its step stays within `limit`
/// because the caching allocator releases its cached segments there (see `check`), and its
/// peaks are then the ones under that limit.
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
    // Every candidate is the fastest plan within a falling target: searches that reuse their
    // front while it answers.
    let chain = session.shared_chain();
    let mut fastest = FastestWithin::new(&chain)?;
    loop {
        let candidate = fastest
            .least_time_within(target)?
            .map(|s| (s.peak, plan_of(&s.plan)));
        let Some((requested, plan)) = candidate else {
            // Nothing left below the target: the least-peak plan is the best there is.
            let best = plan_of(&fastest.min_peak()?.plan);
            let (peaks, fitted) = check(session, kind, limit, &best)?;
            checked += 1;
            if let Some(fitted) = fitted {
                // A step down by the overshoot can pass it by: the least-peak plan fits.
                return Ok((best, fitted, checked));
            }
            let (peak, entries) = match least {
                Some((p, n)) if p < kind.of(&peaks) => (p, n),
                _ => (kind.of(&peaks), best.entries.len()),
            };
            // On a reserved budget, the least device the least-peak plan fits is what to ask for.
            let peak = if kind == BudgetKind::Reserved {
                peak.min(least_fitting_limit(session, &best, &peaks)?)
            } else {
                peak
            };
            return Err(SearchError::Infeasible {
                budget: limit,
                kind,
                best: peak,
                best_plan_entries: entries,
            });
        };
        let (peaks, fitted) = check(session, kind, limit, &plan)?;
        checked += 1;
        if let Some(fitted) = fitted {
            return Ok((plan, fitted, checked));
        }
        let peak = kind.of(&peaks);
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

/// The exact peaks of `plan` with no reserve limit, and its peaks when it fits `limit`: as it
/// is, or, for a reserved budget, on a device of `limit` bytes whose caching allocator releases
/// its cached segments at the limit and retries (as PyTorch's does on a full device; Meta
/// replays the rule, [`PlanningSession::exact_peaks_within`]).
fn check(
    session: &mut PlanningSession,
    kind: BudgetKind,
    limit: u64,
    plan: &Plan,
) -> Result<(AllocatorLevels, Option<AllocatorLevels>)> {
    let peaks = session.exact_peaks(plan)?;
    if kind.of(&peaks) <= limit {
        return Ok((peaks, Some(peaks)));
    }
    if kind == BudgetKind::Reserved {
        return Ok((peaks, session.exact_peaks_within(plan, limit)?));
    }
    Ok((peaks, None))
}

/// Every segment the caching allocator reserves is a whole number of these bytes (2 MiB small
/// segments, 20 MiB large ones, own-size segments rounded to 2 MiB), so a reserve limit only
/// matters in these steps.
const SEGMENT_UNIT: u64 = 2 << 20;

/// The least reserve limit, in whole [`SEGMENT_UNIT`]s, on which `plan` (whose unbounded peaks
/// are `peaks`) fits: bisection between its allocated peak (no limit below it can fit) and its
/// unbounded reserved peak (which fits), about log2 of their gap in MiB Meta steps.
fn least_fitting_limit(session: &mut PlanningSession, plan: &Plan, peaks: &AllocatorLevels) -> Result<u64> {
    let mut fits = peaks.reserved_bytes.div_ceil(SEGMENT_UNIT);
    let mut fails = (peaks.allocated_bytes / SEGMENT_UNIT).saturating_sub(1);
    while fits - fails > 1 {
        let mid = fails + (fits - fails) / 2;
        if session.exact_peaks_within(plan, mid * SEGMENT_UNIT)?.is_some() {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    Ok((fits * SEGMENT_UNIT).min(peaks.reserved_bytes))
}

fn plan_of(chosen: &[crate::chain::Chosen<'_>]) -> Plan {
    Plan {
        version: PLAN_VERSION,
        entries: plan_entries(chosen),
    }
}
