//! The dynamic program against brute force, and how its work grows.

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
            let nodes: Vec<BoxedStrategy<ChainNode>> = (0..n).map(|i| arb_node(1, i.to_string())).collect();
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
