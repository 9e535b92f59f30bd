//! The optimal plans of a [`ChainModel`]: a dynamic program over the chain whose states are
//! prefixes of plans, each with (K: bytes kept so far, M: largest term so far, extra time).
//!
//! # Why the pruning loses nothing
//!
//! Every later term of the peak (see [`crate::chain`]) is `base + K + c`, where `K` is what the
//! prefix keeps and `c` (what later segments keep before that term, plus the term's own figure)
//! depends on the later segments' options alone. So under every completion the plan's peak is
//! `max(M, base + K + G_c)` (`G_c`: the completion's largest `c`), non-decreasing in `K` and
//! `M`, and its time is `ms + later ms`, extra times never being negative.
//!
//! 1. **Lifting to the least completion.** `rest.rs` computes, for every position, the least
//!    `G` over every completion, `G(pos) = min_o max(c_o, kept_o + G(next))`, backwards over the
//!    chain. Replacing `M` by `max(M, base + K + G(pos))` changes no completion's peak
//!    (`max(M, base + K + G_c)` with `G_c >= G(pos)`), and where nothing follows nothing is
//!    lifted, so the final peak is the exact one. The lifted `M` is the least peak the prefix
//!    can still reach: a prefix over a budget is dropped at once, and prefixes whose own `M` is
//!    below what is coming anyway compare on `K` and time alone.
//! 2. **Dominance, by question** ([`Keep`]). A prefix with `K`, `M` and time no larger than
//!    another's is at least as good under every completion (all three: the Pareto front). For
//!    the least time within a budget, `M` matters only for feasibility, already decided by (1),
//!    so `K` and time suffice (`M` breaks equal times). For "does any plan fit", the least `K`
//!    suffices: one prefix per position.
//! 3. **Bisection.** The least peak is the least budget any plan fits (question 3 of (2), cheap);
//!    the least peak within a time limit is the least budget whose least-time plan is within the
//!    limit, and that plan's peak is that budget.
//!
//! `dp::tests` checks every entry point against brute force over every plan of random chains
//! (changing a bound by one byte makes them fail), and bounds how the work grows with the
//! chain's length.
//!
//! Plans are kept as shared back-pointer lists, so extending a prefix costs O(1), and full
//! dominance is found in O(n log n) with a staircase of (M, least time) over prefixes sorted
//! by `K`.

use crate::Result;
use crate::chain::{ChainModel, ChainNode, ChainSegment, Chosen, Walk, run_bounds};
use rest::{NodeRest, SplitRest};
use std::collections::BTreeMap;
use std::rc::Rc;

mod rest;

/// A plan found by the dynamic program, with its predicted figures.
#[derive(Debug, Clone)]
pub struct Solution<'a> {
    /// Segments in forward order with their options.
    pub plan: Vec<Chosen<'a>>,
    /// Predicted peak, in bytes.
    pub peak: u64,
    /// Predicted extra time over storing everything, in ms.
    pub extra_ms: f64,
}

/// A prefix's choices, last first; shared between the prefixes that extend it.
struct Trail<'a> {
    chosen: Chosen<'a>,
    prev: Option<Rc<Trail<'a>>>,
}

impl Drop for Trail<'_> {
    /// Iterative, so that dropping a long plan does not recurse once per segment.
    fn drop(&mut self) {
        let mut prev = self.prev.take();
        while let Some(rc) = prev {
            match Rc::try_unwrap(rc) {
                Ok(mut t) => prev = t.prev.take(),
                Err(_) => break,
            }
        }
    }
}

/// A prefix: its walk, its time and its choices. A new prefix shares its parent's trail and
/// holds its own last choice apart, so that a prefix that is pruned right away costs no
/// allocation; [`settle`] moves the last choice into the trail of the survivors.
#[derive(Clone)]
struct State<'a> {
    walk: Walk,
    ms: f64,
    trail: Option<Rc<Trail<'a>>>,
    last: Option<Chosen<'a>>,
}

impl<'a> State<'a> {
    fn plan(&self) -> Vec<Chosen<'a>> {
        let mut out: Vec<Chosen<'a>> = self.last.into_iter().collect();
        let mut t = self.trail.as_deref();
        while let Some(trail) = t {
            out.push(trail.chosen);
            t = trail.prev.as_deref();
        }
        out.reverse();
        out
    }

    fn solution(&self) -> Solution<'a> {
        Solution {
            plan: self.plan(),
            peak: self.walk.finish(),
            extra_ms: self.ms,
        }
    }
}

/// What the prefixes are compared on, by what the search asks for (each exact for its
/// question, see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Keep {
    /// Kept bytes, peak and time: every Pareto-optimal plan.
    Front,
    /// Kept bytes and time, the peak deciding only between equal times: the least time within
    /// a budget (the budget itself is checked on every prefix).
    LeastTime,
    /// Kept bytes alone: whether any plan fits the budget.
    Feasible,
}

/// Keeps the states no other state dominates under `keep` (the first of equal ones), sorted by
/// (K, M, time).
fn prune(mut states: Vec<State<'_>>, keep: Keep) -> Vec<State<'_>> {
    // Stable: of equal states the first (in the order the chain offers them) is kept.
    states.sort_by(|a, b| {
        (a.walk.kept, a.walk.max)
            .cmp(&(b.walk.kept, b.walk.max))
            .then(a.ms.total_cmp(&b.ms))
    });
    match keep {
        Keep::Front => prune_front(states),
        Keep::LeastTime => {
            // An earlier state (K no larger) with less time, or equal time and M no larger.
            let mut best: Option<(f64, u64)> = None;
            states
                .into_iter()
                .filter(|s| {
                    let dominated = best.is_some_and(|(ms, m)| ms < s.ms || (ms == s.ms && m <= s.walk.max));
                    if !dominated {
                        best = Some(match best {
                            Some((ms, m)) if ms == s.ms => (ms, m.min(s.walk.max)),
                            _ => (s.ms, s.walk.max),
                        });
                    }
                    !dominated
                })
                .collect()
        }
        // The least K (ties: least M, then least time) answers every later question of fit.
        Keep::Feasible => states.into_iter().take(1).collect(),
    }
}

/// Full dominance on (K, M, time) of states sorted by (K, M, time): a state is dominated
/// exactly when an earlier one has M and time no larger, which the staircase (M -> least time
/// among earlier states with at most that M, strictly falling) answers in O(log n).
fn prune_front(states: Vec<State<'_>>) -> Vec<State<'_>> {
    let mut stairs: BTreeMap<u64, f64> = BTreeMap::new();
    let mut kept: Vec<State<'_>> = Vec::with_capacity(states.len());
    for s in states {
        let dominated = stairs
            .range(..=s.walk.max)
            .next_back()
            .is_some_and(|(_, &ms)| ms <= s.ms);
        if dominated {
            continue;
        }
        // Entries above with no less time are now dominated by this one.
        let above: Vec<u64> = stairs
            .range(s.walk.max..)
            .take_while(|(_, ms)| **ms >= s.ms)
            .map(|(&m, _)| m)
            .collect();
        for m in above {
            stairs.remove(&m);
        }
        stairs.insert(s.walk.max, s.ms);
        kept.push(s);
    }
    kept
}

/// The byte budget a prefix must stay within (item 3) and what prefixes are compared on.
#[derive(Clone, Copy)]
struct Limits {
    budget: u64,
    keep: Keep,
}

#[cfg(test)]
thread_local! {
    /// Prefixes created on this thread (tests of how the search scales).
    static CREATED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn apply<'a>(states: &[State<'a>], seg: &'a ChainSegment, limits: Limits) -> Result<Vec<State<'a>>> {
    #[cfg(test)]
    CREATED.with(|c| c.set(c.get() + (states.len() * seg.options.len()) as u64));
    let mut out = Vec::with_capacity(states.len() * seg.options.len());
    for s in states {
        for (o, option) in seg.options.iter().enumerate() {
            let mut walk = s.walk;
            walk.step(seg, option)?;
            let ms = s.ms + option.extra_ms;
            if walk.max > limits.budget {
                continue;
            }
            out.push(State {
                walk,
                ms,
                trail: s.trail.clone(),
                last: Some(Chosen {
                    segment: seg,
                    option: o,
                }),
            });
        }
    }
    Ok(out)
}

/// Lifts every state by `rest` (the bound of what follows; `None`: nothing follows), drops
/// those over the budget and the dominated ones.
fn settle<'a>(mut states: Vec<State<'a>>, rest: Option<u64>, limits: Limits) -> Vec<State<'a>> {
    if let Some(rest) = rest {
        for s in &mut states {
            s.walk.lift(rest);
        }
        states.retain(|s| s.walk.max <= limits.budget);
    }
    let mut kept = prune(states, limits.keep);
    for s in &mut kept {
        if let Some(chosen) = s.last.take() {
            s.trail = Some(Rc::new(Trail {
                chosen,
                prev: s.trail.take(),
            }));
        }
    }
    kept
}

/// Runs `nodes` on `states`; `rests` (when lifting) says what follows each node.
fn process<'a>(
    nodes: &'a [ChainNode],
    rests: Option<&[NodeRest]>,
    mut states: Vec<State<'a>>,
    limits: Limits,
) -> Result<Vec<State<'a>>> {
    for (k, node) in nodes.iter().enumerate() {
        let rest = rests.map(|r| &r[k]);
        states = match node {
            ChainNode::Segment(seg) => apply(&states, seg, limits)?,
            ChainNode::Splittable { whole, parts, runs } => {
                let mut both = apply(&states, whole, limits)?;
                let split = rest.and_then(|r| r.split.as_ref());
                both.extend(process_parts(parts, runs, split, states, limits)?);
                both
            }
        };
        states = settle(states, rest.and_then(|r| r.after), limits);
    }
    Ok(states)
}

/// The children of a split node as a DAG over positions: from position `i`, child `i` leads to
/// `i + 1` and a run `i..j` to `j`. The states reaching the end are settled by the caller.
fn process_parts<'a>(
    parts: &'a [ChainNode],
    runs: &'a [ChainSegment],
    rest: Option<&SplitRest>,
    states: Vec<State<'a>>,
    limits: Limits,
) -> Result<Vec<State<'a>>> {
    let n = parts.len();
    let mut at: Vec<Vec<State<'a>>> = vec![Vec::new(); n + 1];
    at[0] = states;
    for i in 0..n {
        let here = settle(std::mem::take(&mut at[i]), rest.and_then(|r| r.at[i]), limits);
        for run in runs.iter().filter(|r| run_bounds(r)[0] == i) {
            let end = run_bounds(run)[1];
            if end > n {
                continue;
            }
            let reached = apply(&here, run, limits)?;
            at[end].extend(reached);
        }
        let child_rests = rest.map(|r| &r.parts[i..i + 1]);
        let next = process(&parts[i..i + 1], child_rests, here, limits)?;
        at[i + 1].extend(next);
    }
    Ok(std::mem::take(&mut at[n]))
}

/// Every Pareto-optimal complete plan within `limits`.
fn finals<'a>(chain: &'a ChainModel, limits: Limits) -> Result<Vec<Solution<'a>>> {
    let walk = Walk::start(chain)?;
    let rests = rest::lay_out(chain)?;
    let start = State {
        walk,
        ms: 0.0,
        trail: None,
        last: None,
    };
    Ok(process(&chain.nodes, rests.as_deref(), vec![start], limits)?
        .iter()
        .map(State::solution)
        .filter(|s| s.peak <= limits.budget)
        .collect())
}

/// The plan of least extra time whose predicted peak is at most `budget` bytes (ties: lower
/// peak); `None` when no plan fits.
pub fn least_time_within(chain: &ChainModel, budget: u64) -> Result<Option<Solution<'_>>> {
    let limits = Limits {
        budget,
        keep: Keep::LeastTime,
    };
    Ok(finals(chain, limits)?
        .into_iter()
        .min_by(|a, b| a.extra_ms.total_cmp(&b.extra_ms).then(a.peak.cmp(&b.peak))))
}

/// Whether some plan's predicted peak is at most `budget` bytes: prefixes compared on kept
/// bytes alone, so one per position.
fn fits(chain: &ChainModel, budget: u64) -> Result<bool> {
    let limits = Limits {
        budget,
        keep: Keep::Feasible,
    };
    Ok(!finals(chain, limits)?.is_empty())
}

/// Peak of storing everything (every node whole, option 0), in bytes: a plan always exists.
fn store_all_peak(chain: &ChainModel) -> Result<u64> {
    chain.peak(&chain.pick_plan(&mut |_| 0))
}

/// The least `b` in `lo..=hi` with `ok(b)`, given `ok(hi)`; `ok` may answer with a smaller
/// value that is known to pass, which it then returns instead of `true`.
fn least_passing(mut lo: u64, mut hi: u64, mut ok: impl FnMut(u64) -> Result<Option<u64>>) -> Result<u64> {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match ok(mid)? {
            Some(reached) => hi = reached.min(mid),
            None => lo = mid + 1,
        }
    }
    Ok(hi)
}

/// The least predicted peak of any plan, in bytes: bisection over the budget with the
/// kept-bytes-only feasibility search.
fn least_peak(chain: &ChainModel) -> Result<u64> {
    let hi = store_all_peak(chain)?;
    least_passing(chain.base, hi, |b| Ok(fits(chain, b)?.then_some(b)))
}

/// The plan of least predicted peak (ties: least extra time): the least peak by bisection
/// ([`fits`]), then the least time within it.
pub fn min_peak(chain: &ChainModel) -> Result<Solution<'_>> {
    let least = least_peak(chain)?;
    least_time_within(chain, least)?
        .ok_or_else(|| crate::SearchError::Internal("no plan reaches the least peak the chain found".into()))
}

/// The plan of least predicted peak whose extra time is at most `max_extra_ms` (ties: least
/// time): the least budget whose least-time plan is within the limit, by bisection between the
/// least peak and storing everything (which takes no extra time), then that plan. Its peak is
/// that budget: a plan below it would make a smaller budget pass.
pub fn min_peak_within_time(chain: &ChainModel, max_extra_ms: f64) -> Result<Solution<'_>> {
    let hi = store_all_peak(chain)?;
    let lo = least_peak(chain)?;
    let budget = least_passing(lo, hi, |b| {
        Ok(least_time_within(chain, b)?
            .filter(|s| s.extra_ms <= max_extra_ms)
            .map(|s| s.peak))
    })?;
    least_time_within(chain, budget)?
        .filter(|s| s.extra_ms <= max_extra_ms)
        .ok_or_else(|| {
            crate::SearchError::Internal(
                "storing everything takes no extra time, yet no plan was found".into(),
            )
        })
}

/// The plans on the Pareto front of (peak, extra time), by increasing peak.
pub fn pareto_front(chain: &ChainModel) -> Result<Vec<Solution<'_>>> {
    let mut all = finals(
        chain,
        Limits {
            budget: u64::MAX,
            keep: Keep::Front,
        },
    )?;
    all.sort_by(|a, b| a.peak.cmp(&b.peak).then(a.extra_ms.total_cmp(&b.extra_ms)));
    let mut front: Vec<Solution<'_>> = Vec::new();
    for s in all {
        if front.last().is_none_or(|l| s.extra_ms < l.extra_ms) {
            front.push(s);
        }
    }
    Ok(front)
}

#[cfg(test)]
mod tests;
