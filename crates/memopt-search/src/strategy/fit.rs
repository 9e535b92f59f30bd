//! The search for the fastest plan whose exact peak of a budget's kind ([`BudgetKind`]) fits:
//! the chain model proposes plans on requested bytes (exact, and never above the allocated or
//! reserved bytes), a Meta step checks each proposal's peak of the budget's kind.

use crate::chain::{ChainModel, ChainNode, plan_of, run_bounds};
use crate::dp::FastestWithin;
use crate::report::BudgetKind;
use crate::session::PlanningSession;
use crate::{Result, SearchError};
use memopt_checkpoint::Plan;
use memopt_core::ModulePath;
use memopt_profiler::AllocatorLevels;

/// Candidates tried one by one, each the fastest plan strictly below the previous one's
/// requested peak, before the search steps down by the whole overshoot at once.
const ONE_BY_ONE: usize = 48;

/// A plan that fits, its exact peaks, the candidates checked and its predicted extra time (ms).
type Fitted = (Plan, AllocatorLevels, usize, f64);

/// The fastest plan the chain models propose whose exact peak of `kind` (a Meta step) fits
/// `limit` bytes (see `walk`), with its exact peaks and the number of candidates checked.
///
/// Candidates are ranked on requested bytes, and a run through an inlined child (a VGG block's
/// BatchNorm and neuron, see [`memopt_checkpoint::module::chain_links`]) frees a large
/// temporary in the middle of its block, which can leave the caching allocator's segments
/// fragmented: on the VGG at N=32 the fastest plans within half the baseline's reserved peak
/// reserve 1.86 GiB for 1.43 GiB requested, and the falling target then passes over the plans
/// of the same requested peak without such runs. Runs going on into a block's pooling
/// ([`memopt_checkpoint::PlanEntry::into_next`]) expand its gradient in chunk-sized pieces,
/// which can fragment it too. So the walk runs on each of the session's chain models
/// ([`PlanningSession::chains`]: with poolings split off, and without), each as it is and
/// without runs through inlined children, and the fastest fitting plan wins (the earlier
/// walk's on a tie); infeasible means infeasible on all, and the error names the least peak
/// any walk found.
pub(crate) fn fastest_fitting(
    session: &mut PlanningSession,
    kind: BudgetKind,
    limit: u64,
) -> Result<(Plan, AllocatorLevels, usize)> {
    let mut variants = Vec::new();
    for chain in session.shared_chains() {
        let without = without_partial_runs(&chain);
        variants.push(chain);
        variants.extend(without.map(std::sync::Arc::new));
    }
    let mut best: Option<Fitted> = None;
    let mut infeasible: Option<SearchError> = None;
    let mut checked = 0;
    for chain in &variants {
        match walk(session, chain, kind, limit) {
            Ok(fitted) => {
                checked += fitted.2;
                if best.as_ref().is_none_or(|b| fitted.3 < b.3) {
                    best = Some(fitted);
                }
            }
            Err(e @ SearchError::Infeasible { .. }) => {
                // Keep the error naming the least peak any walk found (the earlier on a tie).
                let least = |e: &SearchError| match e {
                    SearchError::Infeasible { best, .. } => *best,
                    _ => u64::MAX,
                };
                if infeasible.as_ref().is_none_or(|k| least(&e) < least(k)) {
                    infeasible = Some(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    match (best, infeasible) {
        (Some((plan, peaks, _, _)), _) => Ok((plan, peaks, checked)),
        (None, Some(e)) => Err(e),
        (None, None) => Err(SearchError::Internal("the session has no chain model".into())),
    }
}

/// `chain` without the runs that cross the boundary of an inlined child (see
/// [`fastest_fitting`]); `None` when it has none.
fn without_partial_runs(chain: &ChainModel) -> Option<ChainModel> {
    let mut out = chain.clone();
    let removed: usize = out.nodes.iter_mut().map(drop_partial_runs).sum();
    (removed > 0).then_some(out)
}

/// Drops the runs of `node` (and of the nodes below it) that cross the boundary of an inlined
/// child (links whose path's parent is not the node's own): that hold some of its links and a
/// link outside it, but not all of its links. Returns how many.
fn drop_partial_runs(node: &mut ChainNode) -> usize {
    let ChainNode::Splittable { whole, parts, runs } = node else {
        return 0;
    };
    let own = ModulePath::from(whole.path.as_str());
    let group = |i: usize| {
        ModulePath::from(parts[i].segment().path.as_str())
            .parent()
            .filter(|p| *p != own)
    };
    let partial = |[a, b]: [usize; 2]| {
        (a..b).any(|i| {
            group(i).is_some_and(|g| {
                let first = (0..parts.len())
                    .find(|&j| group(j).as_ref() == Some(&g))
                    .unwrap_or(i);
                let end = (first..parts.len())
                    .take_while(|&j| group(j).as_ref() == Some(&g))
                    .last()
                    .map_or(i, |j| j)
                    + 1;
                // Reaching out of the child without covering all of it.
                (a < first || b > end) && (a > first || b < end)
            })
        })
    };
    let before = runs.len();
    runs.retain(|r| !partial(run_bounds(r)));
    let mut removed = before - runs.len();
    for p in parts.iter_mut() {
        removed += drop_partial_runs(p);
    }
    removed
}

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
fn walk(session: &mut PlanningSession, chain: &ChainModel, kind: BudgetKind, limit: u64) -> Result<Fitted> {
    let mut target = limit;
    let mut checked = 0usize;
    let mut least: Option<(u64, usize)> = None;
    // Every candidate is the fastest plan within a falling target: searches that reuse their
    // front while it answers.
    let mut fastest = FastestWithin::new(chain)?;
    loop {
        let candidate = fastest
            .least_time_within(target)?
            .map(|s| (s.peak, plan_of(&s.plan), s.extra_ms));
        let Some((requested, plan, extra_ms)) = candidate else {
            // Nothing left below the target: the least-peak plan is the best there is.
            let least_peak = fastest.min_peak()?;
            let (best, extra_ms) = (plan_of(&least_peak.plan), least_peak.extra_ms);
            let (peaks, fitted) = check(session, kind, limit, &best)?;
            checked += 1;
            if let Some(fitted) = fitted {
                // A step down by the overshoot can pass it by: the least-peak plan fits.
                return Ok((best, fitted, checked, extra_ms));
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
            return Ok((plan, fitted, checked, extra_ms));
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

#[cfg(test)]
mod tests {
    use super::*;
    use memopt_profiler::Workload;

    /// The runs of `chain` under `path` (a splittable node somewhere in it).
    fn runs_of(nodes: &[ChainNode], path: &str) -> Option<Vec<[usize; 2]>> {
        nodes.iter().find_map(|n| match n {
            ChainNode::Splittable { whole, parts, runs } => {
                if whole.path == path {
                    Some(runs.iter().map(|r| r.children.unwrap_or_default()).collect())
                } else {
                    runs_of(parts, path)
                }
            }
            ChainNode::Segment(_) => None,
        })
    }

    #[test]
    fn the_chain_without_partial_runs_drops_exactly_the_runs_through_proj_bn() {
        let workload = Workload::zoo_small("cifar10dvs-vgg", 1).unwrap();
        let session = PlanningSession::new(&workload).unwrap();
        let full = session.chain();
        let without = without_partial_runs(full).expect("the VGG blocks have runs through proj_bn");
        // features.3: links conv, BatchNorm, neuron (proj_bn = links 0..2). features.2: pool,
        // conv, BatchNorm, neuron (proj_bn = links 0..3), split by the chain model into its pool
        // and the rest, whose runs are those of links 1..4. Runs covering all of proj_bn or
        // none of it, or inside it, stay.
        assert_eq!(runs_of(&full.nodes, "features.3").unwrap(), vec![[0, 2], [1, 3]]);
        assert_eq!(runs_of(&without.nodes, "features.3").unwrap(), vec![[0, 2]]);
        let all = runs_of(&full.nodes, "features.2").unwrap();
        assert_eq!(all, vec![[1, 3], [2, 4]]);
        assert_eq!(runs_of(&without.nodes, "features.2").unwrap(), vec![[1, 3]]);
        // Runs of other containers (features' blocks, proj_bn's own) are untouched.
        assert_eq!(
            runs_of(&without.nodes, "features"),
            runs_of(&full.nodes, "features")
        );
        let segments = |c: &ChainModel| -> usize {
            fn count(n: &ChainNode) -> usize {
                match n {
                    ChainNode::Segment(_) => 1,
                    ChainNode::Splittable { parts, runs, .. } => {
                        1 + runs.len() + parts.iter().map(count).sum::<usize>()
                    }
                }
            }
            c.nodes.iter().map(count).sum()
        };
        // One run dropped in each block: [BatchNorm, neuron].
        assert_eq!(segments(full) - segments(&without), 8);
    }
}
