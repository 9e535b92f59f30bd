//! The optimal plans of a [`ChainModel`]: a dynamic program over the chain whose states are
//! the Pareto-optimal (bytes kept so far, largest term so far, extra time) triples.
//!
//! # Why the pruning loses nothing
//!
//! Every later term of the peak (see [`crate::chain`]) is `base + K + c`, where `K` is what the
//! prefix keeps (only growing: later segments add to it) and `c` depends on the later segments'
//! options alone. So for every completion of a prefix, the plan's peak is
//! `max(M, future(K))` with `future` non-decreasing in `K`, and its time is `ms + later ms`.
//!
//! 1. **Dominance.** A prefix with `K <= K'`, `M <= M'` and `ms <= ms'` is, under every
//!    completion, at least as good as the other in peak and in time; dropping the other loses
//!    no optimal plan (of equal ones the first is kept).
//! 2. **Lifting by a lower bound.** Whatever the later segments choose, each of them has a term
//!    of at least `base + K + r_j`, where `r_j` is the least over its options of its own
//!    forward or backward term above what earlier segments keep ([`Bounds`]); the later
//!    segments run in one of a few orders (whole or split), so the least over those orders of
//!    the largest `r_j`, `rest`, is a lower bound every completion reaches:
//!    `future(K) >= base + K + rest`. Replacing `M` by `max(M, base + K + rest)` therefore
//!    changes no completion's peak (`max(M, future) = max(M, base + K + rest, future)`), and
//!    the final peak, computed where nothing follows, is the exact one. Lifting makes prefixes
//!    whose `M` is below what is coming anyway equal in `M`, so dominance (1) can compare them
//!    on `K` and time alone, which is what keeps the fronts small on long chains.
//! 3. **Feasibility.** A prefix whose lifted `M` is above a byte budget, or whose time is above
//!    a time limit, has no completion within it (extra times are never negative).
//!
//! `dp::tests` checks every entry point against brute force over every plan of random chains.
//!
//! Plans are kept as shared back-pointer lists, so extending a prefix costs O(1), and dominance
//! is found in O(n log n) per step with a staircase of (M, least time) over prefixes sorted by
//! `K`.

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
    // Stable: the states arrive as runs already sorted by K (a sorted front plus one
    // option), which a stable sort merges in about linear time.
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
    // Option by option, so that each option's states come out sorted by K like `states`.
    for (o, option) in seg.options.iter().enumerate() {
        for s in states {
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
mod tests {
    use super::*;
    use crate::chain::{ChainSegment, SegmentOption};
    use memopt_checkpoint::Policy;
    use proptest::prelude::*;

    fn segment(path: String, opts: Vec<(u64, u64, u64, f64)>, states: u64, grads: u64) -> ChainSegment {
        ChainSegment {
            path,
            children: None,
            options: opts
                .into_iter()
                .enumerate()
                .map(|(i, (f, k, b, ms))| SegmentOption {
                    policy: if i == 0 { Policy::Store } else { Policy::CHECKPOINT },
                    forward_peak: f,
                    kept: k,
                    backward_peak: b,
                    extra_ms: if i == 0 { 0.0 } else { ms },
                })
                .collect(),
            states,
            param_grads: grads,
        }
    }

    type Opt = (u64, u64, u64, f64);

    fn arb_segment(path: String) -> impl Strategy<Value = ChainSegment> {
        let opt = (1u64..200, 0u64..150, 1u64..300, 0.0f64..20.0);
        (proptest::collection::vec(opt, 1..4), 0u64..20, 0u64..50)
            .prop_map(move |(opts, s, g): (Vec<Opt>, u64, u64)| segment(path.clone(), opts, s, g))
    }

    fn arb_node(depth: u32, path: String) -> BoxedStrategy<ChainNode> {
        let leaf = arb_segment(path.clone()).prop_map(ChainNode::Segment).boxed();
        if depth == 0 {
            return leaf;
        }
        let parts_path = path.clone();
        let split = (arb_segment(path), 1usize..4)
            .prop_flat_map(move |(whole, n)| {
                let parts: Vec<BoxedStrategy<ChainNode>> = (0..n)
                    .map(|i| arb_node(depth - 1, format!("{parts_path}.{i}")))
                    .collect();
                (Just(whole), parts)
            })
            .prop_flat_map(|(whole, parts)| {
                let n = parts.len();
                let runs = proptest::collection::vec((0..n, 1..=n, arb_segment("run".into())), 0..3);
                (Just(whole), Just(parts), runs)
            })
            .prop_map(|(whole, parts, runs)| {
                // A split keeps the same parameters and states as the whole; so does a run.
                let mut whole = whole;
                whole.param_grads = parts.iter().map(|p| p.segment().param_grads).sum();
                whole.states = parts.iter().map(|p| p.segment().states).sum();
                let runs = runs
                    .into_iter()
                    .filter(|(a, len, _)| a + len <= parts.len() && *len >= 2)
                    .map(|(a, len, mut seg)| {
                        seg.children = Some([a, a + len]);
                        seg.param_grads = parts[a..a + len].iter().map(|p| p.segment().param_grads).sum();
                        seg.states = parts[a..a + len].iter().map(|p| p.segment().states).sum();
                        seg
                    })
                    .collect();
                ChainNode::Splittable { whole, parts, runs }
            })
            .boxed();
        prop_oneof![leaf, split].boxed()
    }

    fn arb_chain() -> impl Strategy<Value = ChainModel> {
        (0u64..100, 1usize..5)
            .prop_flat_map(|(base, n)| {
                let nodes: Vec<BoxedStrategy<ChainNode>> =
                    (0..n).map(|i| arb_node(1, i.to_string())).collect();
                (Just(base), nodes)
            })
            .prop_map(|(base, nodes)| ChainModel { base, nodes })
    }

    /// Brute force: every plan with its peak and time.
    fn every_plan(chain: &ChainModel) -> Vec<(u64, f64)> {
        chain
            .all_plans()
            .iter()
            .map(|p| (chain.peak(p).unwrap(), ChainModel::extra_ms(p)))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The DP's least-time plan within a budget costs exactly what brute force over every
        /// plan finds, and is infeasible exactly when brute force finds nothing.
        #[test]
        fn least_time_equals_brute_force(chain in arb_chain(), frac in 0.0f64..1.2) {
            let all = every_plan(&chain);
            let (lo, hi) = (all.iter().map(|p| p.0).min().unwrap(), all.iter().map(|p| p.0).max().unwrap());
            let budget = lo + ((hi - lo) as f64 * frac) as u64;
            let best = all.iter().filter(|(p, _)| *p <= budget).map(|(_, ms)| *ms).min_by(f64::total_cmp);
            let dp = least_time_within(&chain, budget).unwrap();
            match (best, dp) {
                (None, None) => {}
                (Some(b), Some(s)) => {
                    prop_assert!((s.extra_ms - b).abs() < 1e-9, "dp {} vs brute {}", s.extra_ms, b);
                    prop_assert!(s.peak <= budget);
                    prop_assert_eq!(s.peak, chain.peak(&s.plan).unwrap(), "reported peak is the plan's peak");
                }
                (b, s) => prop_assert!(false, "brute {:?} vs dp {:?}", b, s.map(|s| s.peak)),
            }
            let least = min_peak(&chain).unwrap();
            prop_assert_eq!(least.peak, lo);
            prop_assert_eq!(least.peak, chain.peak(&least.plan).unwrap());
        }

        /// The least peak within a time limit, and the Pareto front of (peak, time), equal
        /// brute force's: the bounds and dominance pruning lose no plan.
        #[test]
        fn time_limited_and_front_equal_brute_force(chain in arb_chain(), frac in 0.0f64..1.2) {
            let all = every_plan(&chain);
            let most = all.iter().map(|p| p.1).fold(0.0, f64::max);
            let limit = most * frac;
            let best = all.iter().filter(|(_, ms)| *ms <= limit).map(|(p, _)| *p).min().unwrap();
            let dp = min_peak_within_time(&chain, limit).unwrap();
            prop_assert_eq!(dp.peak, best);
            prop_assert!(dp.extra_ms <= limit);
            prop_assert_eq!(dp.peak, chain.peak(&dp.plan).unwrap());
            // Brute force's front: each peak's least time, kept when it beats every lower peak.
            let mut sorted = all.clone();
            sorted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            let mut front: Vec<(u64, f64)> = Vec::new();
            for (p, ms) in sorted {
                if front.last().is_none_or(|l| ms < l.1) {
                    front.push((p, ms));
                }
            }
            let dp_front: Vec<(u64, f64)> = pareto_front(&chain).unwrap().iter().map(|s| (s.peak, s.extra_ms)).collect();
            prop_assert_eq!(dp_front.len(), front.len(), "dp {:?} vs brute {:?}", dp_front, front);
            for (d, b) in dp_front.iter().zip(&front) {
                prop_assert_eq!(d.0, b.0);
                prop_assert!((d.1 - b.1).abs() < 1e-9);
            }
        }
    }

    /// A flat chain of `n` conv-like segments with pseudo-random figures (store, checkpoint,
    /// two chunk counts), then a loss.
    fn long_chain(n: usize) -> ChainModel {
        let mut x: u64 = 0x9e37_79b9;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let nodes = (0..n)
            .map(|i| {
                let act = 1000 + next(4000);
                let opts = vec![
                    (act * 2, act * 2, act * 3, 0.0),
                    (act * 2, act / 8, act * 4, 1.0 + next(100) as f64 / 10.0),
                    (act + act / 2, act / 8, act * 3, 1.5 + next(100) as f64 / 10.0),
                    (
                        act + act / 4,
                        act / 8 + act / 16,
                        act * 2,
                        2.0 + next(100) as f64 / 10.0,
                    ),
                ];
                ChainNode::Segment(segment(i.to_string(), opts, act / 4, next(500)))
            })
            .collect();
        ChainModel { base: 10_000, nodes }
    }

    /// Prefixes the searches create on `chain`: least peak, least time within a budget between
    /// the least peak and storing everything, least peak within a time limit.
    fn created(chain: &ChainModel) -> u64 {
        CREATED.with(|c| c.set(0));
        let least = min_peak(chain).unwrap();
        let store = store_all_peak(chain).unwrap();
        least_time_within(chain, least.peak + (store - least.peak) / 2)
            .unwrap()
            .unwrap();
        min_peak_within_time(chain, 20.0).unwrap();
        CREATED.with(|c| c.get())
    }

    /// The searches scale polynomially, not exponentially, with the chain's length: four times
    /// the segments create at most 64 times the prefixes (cubic; measured: about 38 times, as
    /// the fronts of (kept bytes, time) grow with the length). Counts, not times, so that the
    /// check holds on a slow debug build.
    #[test]
    fn the_search_scales_with_chain_length() {
        let (short, long) = (created(&long_chain(20)), created(&long_chain(80)));
        assert!(
            long <= 64 * short,
            "20 segments: {short} prefixes, 80 segments: {long}"
        );
    }

    #[test]
    fn byte_sums_beyond_64_bits_name_the_segment() {
        let big = |name: &str| {
            ChainNode::Segment(segment(
                name.into(),
                vec![(u64::MAX / 2, u64::MAX / 2, 1, 0.0)],
                0,
                0,
            ))
        };
        let chain = ChainModel {
            base: 10,
            nodes: vec![big("features.0"), big("features.1"), big("features.2")],
        };
        let err = least_time_within(&chain, u64::MAX).unwrap_err().to_string();
        assert!(err.contains("'features.") && err.contains("64 bits"), "{err}");
        let err = chain.peak(&chain.pick_plan(&mut |_| 0)).unwrap_err().to_string();
        assert!(err.contains("features.") && err.contains("bytes"), "{err}");
    }

    #[test]
    fn a_tight_budget_forces_checkpointing() {
        let chain = ChainModel {
            base: 10,
            nodes: vec![
                ChainNode::Segment(segment(
                    "a".into(),
                    vec![(50, 40, 60, 0.0), (50, 5, 70, 3.0)],
                    0,
                    0,
                )),
                ChainNode::Segment(segment(
                    "b".into(),
                    vec![(50, 40, 60, 0.0), (50, 5, 70, 2.0)],
                    0,
                    0,
                )),
            ],
        };
        let store = least_time_within(&chain, u64::MAX).unwrap().unwrap();
        assert_eq!(store.extra_ms, 0.0);
        assert_eq!(store.peak, 10 + 40 + 60);
        let tight = least_time_within(&chain, 90).unwrap().unwrap();
        assert_eq!(
            super::super::chain::plan_entries(&tight.plan).len(),
            1,
            "one checkpoint suffices"
        );
        assert_eq!(
            tight.extra_ms, 3.0,
            "the first segment's checkpoint frees memory for the second's backward"
        );
        assert!(least_time_within(&chain, 10).unwrap().is_none());
    }
}
