//! The optimal plans of a [`ChainModel`]: a dynamic program over the chain whose states are
//! the Pareto-optimal (bytes kept so far, largest term so far, extra time) triples. Every term
//! of the peak is "bytes kept by earlier segments + constants + this segment's own figure", so
//! a prefix that keeps no more, peaks no higher and costs no more time than another can always
//! replace it: pruning dominated prefixes loses no optimal plan.

use crate::chain::{ChainModel, ChainNode, ChainSegment, Chosen, Walk, run_bounds};

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

#[derive(Clone)]
struct State<'a> {
    walk: Walk,
    ms: f64,
    plan: Vec<Chosen<'a>>,
}

impl State<'_> {
    fn dominates(&self, other: &Self) -> bool {
        self.walk.kept <= other.walk.kept && self.walk.max <= other.walk.max && self.ms <= other.ms
    }
}

/// Keeps the states no other state dominates (the first of equal ones).
fn prune(mut states: Vec<State<'_>>) -> Vec<State<'_>> {
    states.sort_by(|a, b| {
        (a.walk.kept, a.walk.max)
            .cmp(&(b.walk.kept, b.walk.max))
            .then(a.ms.total_cmp(&b.ms))
    });
    let mut kept: Vec<State<'_>> = Vec::with_capacity(states.len());
    for s in states {
        if !kept.iter().any(|k| k.dominates(&s)) {
            kept.push(s);
        }
    }
    kept
}

fn apply<'a>(states: &[State<'a>], seg: &'a ChainSegment, budget: u64, max_ms: f64) -> Vec<State<'a>> {
    let mut out = Vec::with_capacity(states.len() * seg.options.len());
    for s in states {
        for (o, option) in seg.options.iter().enumerate() {
            let mut walk = s.walk;
            walk.step(seg, option);
            if walk.max > budget || s.ms + option.extra_ms > max_ms {
                continue;
            }
            let mut plan = s.plan.clone();
            plan.push(Chosen {
                segment: seg,
                option: o,
            });
            out.push(State {
                walk,
                ms: s.ms + option.extra_ms,
                plan,
            });
        }
    }
    out
}

fn process_limited<'a>(
    nodes: &'a [ChainNode],
    mut states: Vec<State<'a>>,
    budget: u64,
    max_ms: f64,
) -> Vec<State<'a>> {
    for node in nodes {
        states = match node {
            ChainNode::Segment(seg) => apply(&states, seg, budget, max_ms),
            ChainNode::Splittable { whole, parts, runs } => {
                let mut both = apply(&states, whole, budget, max_ms);
                both.extend(process_parts(parts, runs, states, budget, max_ms));
                both
            }
        };
        states = prune(states);
    }
    states
}

/// The children of a split node as a DAG over positions: from position `i`, child `i` leads to
/// `i + 1` and a run `i..j` to `j`.
fn process_parts<'a>(
    parts: &'a [ChainNode],
    runs: &'a [ChainSegment],
    states: Vec<State<'a>>,
    budget: u64,
    max_ms: f64,
) -> Vec<State<'a>> {
    let mut at: Vec<Vec<State<'a>>> = vec![Vec::new(); parts.len() + 1];
    at[0] = states;
    for i in 0..parts.len() {
        let here = prune(std::mem::take(&mut at[i]));
        for run in runs.iter().filter(|r| run_bounds(r)[0] == i) {
            let reached = apply(&here, run, budget, max_ms);
            at[run_bounds(run)[1]].extend(reached);
        }
        let next = process_limited(&parts[i..i + 1], here, budget, max_ms);
        at[i + 1].extend(next);
    }
    prune(std::mem::take(&mut at[parts.len()]))
}

fn finals<'a>(chain: &'a ChainModel, budget: u64) -> Vec<Solution<'a>> {
    let start = State {
        walk: Walk::start(chain),
        ms: 0.0,
        plan: Vec::new(),
    };
    process_limited(&chain.nodes, vec![start], budget, f64::INFINITY)
        .into_iter()
        .map(|s| Solution {
            peak: s.walk.finish(),
            extra_ms: s.ms,
            plan: s.plan,
        })
        .filter(|s| s.peak <= budget)
        .collect()
}

/// The plan of least extra time whose predicted peak is at most `budget` bytes (ties: lower
/// peak); `None` when no plan fits.
pub fn least_time_within(chain: &ChainModel, budget: u64) -> Option<Solution<'_>> {
    finals(chain, budget)
        .into_iter()
        .min_by(|a, b| a.extra_ms.total_cmp(&b.extra_ms).then(a.peak.cmp(&b.peak)))
}

/// The plan of least predicted peak (ties: least extra time). Two passes: the least peak with
/// time ignored (so dominance prunes on memory alone), then the least time within it.
pub fn min_peak(chain: &ChainModel) -> Solution<'_> {
    let memory_only = ChainModel {
        base: chain.base,
        nodes: chain.nodes.iter().map(without_time).collect(),
    };
    let least = finals(&memory_only, u64::MAX)
        .into_iter()
        .map(|s| s.peak)
        .min()
        .expect("storing everything is always a plan");
    least_time_within(chain, least).expect("a plan reaches the least peak")
}

/// A copy of `node` whose options all take no time.
fn without_time(node: &ChainNode) -> ChainNode {
    let strip = |s: &ChainSegment| {
        let mut s = s.clone();
        s.options.iter_mut().for_each(|o| o.extra_ms = 0.0);
        s
    };
    match node {
        ChainNode::Segment(s) => ChainNode::Segment(strip(s)),
        ChainNode::Splittable { whole, parts, runs } => ChainNode::Splittable {
            whole: strip(whole),
            parts: parts.iter().map(without_time).collect(),
            runs: runs.iter().map(strip).collect(),
        },
    }
}

/// The plan of least predicted peak whose extra time is at most `max_extra_ms` (ties: least
/// time). Prefixes over the time limit are dropped as they appear.
pub fn min_peak_within_time(chain: &ChainModel, max_extra_ms: f64) -> Solution<'_> {
    let start = State {
        walk: Walk::start(chain),
        ms: 0.0,
        plan: Vec::new(),
    };
    let mut states = vec![start];
    states = process_limited(&chain.nodes, states, u64::MAX, max_extra_ms);
    states
        .into_iter()
        .map(|s| Solution {
            peak: s.walk.finish(),
            extra_ms: s.ms,
            plan: s.plan,
        })
        .min_by(|a, b| a.peak.cmp(&b.peak).then(a.extra_ms.total_cmp(&b.extra_ms)))
        .expect("storing everything takes no extra time")
}

/// The plans on the Pareto front of (peak, extra time), by increasing peak.
pub fn pareto_front(chain: &ChainModel) -> Vec<Solution<'_>> {
    let mut all = finals(chain, u64::MAX);
    all.sort_by(|a, b| a.peak.cmp(&b.peak).then(a.extra_ms.total_cmp(&b.extra_ms)));
    let mut front: Vec<Solution<'_>> = Vec::new();
    for s in all {
        if front.last().is_none_or(|l| s.extra_ms < l.extra_ms) {
            front.push(s);
        }
    }
    front
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The DP's least-time plan within a budget costs exactly what brute force over every
        /// plan finds, and is infeasible exactly when brute force finds nothing.
        #[test]
        fn least_time_equals_brute_force(chain in arb_chain(), frac in 0.0f64..1.2) {
            let all = chain.all_plans();
            let peaks: Vec<u64> = all.iter().map(|p| chain.peak(p)).collect();
            let (lo, hi) = (*peaks.iter().min().unwrap(), *peaks.iter().max().unwrap());
            let budget = lo + ((hi - lo) as f64 * frac) as u64;
            let best = all.iter().zip(&peaks).filter(|(_, p)| **p <= budget).map(|(p, _)| ChainModel::extra_ms(p)).min_by(f64::total_cmp);
            let dp = least_time_within(&chain, budget);
            match (best, dp) {
                (None, None) => {}
                (Some(b), Some(s)) => {
                    prop_assert!((s.extra_ms - b).abs() < 1e-9, "dp {} vs brute {}", s.extra_ms, b);
                    prop_assert!(s.peak <= budget);
                    prop_assert_eq!(s.peak, chain.peak(&s.plan), "reported peak is the plan's peak");
                }
                (b, s) => prop_assert!(false, "brute {:?} vs dp {:?}", b, s.map(|s| s.peak)),
            }
            prop_assert_eq!(min_peak(&chain).peak, lo);
        }
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
        let store = least_time_within(&chain, u64::MAX).unwrap();
        assert_eq!(store.extra_ms, 0.0);
        assert_eq!(store.peak, 10 + 40 + 60);
        let tight = least_time_within(&chain, 90).unwrap();
        assert_eq!(
            super::super::chain::plan_entries(&tight.plan).len(),
            1,
            "one checkpoint suffices"
        );
        assert_eq!(
            tight.extra_ms, 3.0,
            "the first segment's checkpoint frees memory for the second's backward"
        );
        assert!(least_time_within(&chain, 10).is_none());
    }
}
