//! The dynamic program against brute force, and how its work grows.

use super::*;
use crate::chain::{ChainNode, ChainSegment, SegmentOption};
use memopt_checkpoint::Policy;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

fn segment(path: String, opts: Vec<(u64, u64, u64, f64)>, states: u64, grads: u64) -> ChainSegment {
    ChainSegment {
        path,
        children: None,
        into_next: 0,
        span: None,
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

/// Option times: any in 0..20 ms, or (`grid`) multiples of 2^-10 ms, which `f64` adds exactly,
/// so that limits can sit exactly at a plan's time.
fn arb_ms(grid: bool) -> BoxedStrategy<f64> {
    if grid {
        (0u32..20 * 1024).prop_map(|m| f64::from(m) / 1024.0).boxed()
    } else {
        (0.0f64..20.0).boxed()
    }
}

fn arb_segment(path: String, grid: bool) -> impl Strategy<Value = ChainSegment> {
    let opt = (1u64..200, 0u64..150, 1u64..300, arb_ms(grid));
    (proptest::collection::vec(opt, 1..4), 0u64..20, 0u64..50)
        .prop_map(move |(opts, s, g): (Vec<Opt>, u64, u64)| segment(path.clone(), opts, s, g))
}

/// A node; a split one keeps the gradients of its whole in its children and runs, and its
/// states too unless `drift` (then they differ, and positions depend on the path).
fn arb_node(depth: u32, path: String, grid: bool, drift: bool) -> BoxedStrategy<ChainNode> {
    let leaf = arb_segment(path.clone(), grid)
        .prop_map(ChainNode::Segment)
        .boxed();
    if depth == 0 {
        return leaf;
    }
    let parts_path = path.clone();
    let split = (arb_segment(path, grid), 1usize..4)
        .prop_flat_map(move |(whole, n)| {
            let parts: Vec<BoxedStrategy<ChainNode>> = (0..n)
                .map(|i| arb_node(depth - 1, format!("{parts_path}.{i}"), grid, drift))
                .collect();
            (Just(whole), parts)
        })
        .prop_flat_map(move |(whole, parts)| {
            let n = parts.len();
            let runs = proptest::collection::vec((0..n, 1..=n, arb_segment("run".into(), grid)), 0..3);
            (Just(whole), Just(parts), runs)
        })
        .prop_map(move |(whole, parts, runs)| {
            let mut whole = whole;
            whole.param_grads = parts.iter().map(|p| p.segment().param_grads).sum();
            if !drift {
                whole.states = parts.iter().map(|p| p.segment().states).sum();
            }
            let runs = runs
                .into_iter()
                .filter(|(a, len, _)| a + len <= parts.len() && *len >= 2)
                .map(|(a, len, mut seg)| {
                    seg.children = Some([a, a + len]);
                    seg.param_grads = parts[a..a + len].iter().map(|p| p.segment().param_grads).sum();
                    if !drift {
                        seg.states = parts[a..a + len].iter().map(|p| p.segment().states).sum();
                    }
                    seg
                })
                .collect();
            ChainNode::Splittable { whole, parts, runs }
        })
        .boxed();
    prop_oneof![leaf, split].boxed()
}

fn arb_chain_of(grid: bool, drift: bool) -> impl Strategy<Value = ChainModel> {
    (0u64..100, 1usize..5)
        .prop_flat_map(move |(base, n)| {
            let nodes: Vec<BoxedStrategy<ChainNode>> =
                (0..n).map(|i| arb_node(1, i.to_string(), grid, drift)).collect();
            (Just(base), nodes)
        })
        .prop_map(|(base, nodes)| ChainModel { base, nodes })
}

fn arb_chain() -> impl Strategy<Value = ChainModel> {
    arb_chain_of(false, false)
}

/// Brute force: every plan with its peak and time.
fn every_plan(chain: &ChainModel) -> Vec<(u64, f64)> {
    chain
        .all_plans()
        .iter()
        .map(|p| (chain.peak(p).unwrap(), ChainModel::extra_ms(p)))
        .collect()
}

/// Brute force's Pareto front: each peak's least time, kept when it beats every lower peak.
fn brute_front(all: &[(u64, f64)]) -> Vec<(u64, f64)> {
    let mut sorted = all.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut front: Vec<(u64, f64)> = Vec::new();
    for (p, ms) in sorted {
        if front.last().is_none_or(|l| ms < l.1) {
            front.push((p, ms));
        }
    }
    front
}

/// Checks every entry point on `chain` against brute force at a random budget and time limit
/// (`frac` of the ranges), within 1e-9 ms.
fn check_random_limits(chain: &ChainModel, frac: f64) -> std::result::Result<(), TestCaseError> {
    let all = every_plan(chain);
    let (lo, hi) = (
        all.iter().map(|p| p.0).min().unwrap(),
        all.iter().map(|p| p.0).max().unwrap(),
    );
    let budget = lo + ((hi - lo) as f64 * frac) as u64;
    let best = all
        .iter()
        .filter(|(p, _)| *p <= budget)
        .map(|(_, ms)| *ms)
        .min_by(f64::total_cmp);
    match (best, least_time_within(chain, budget).unwrap()) {
        (None, None) => {}
        (Some(b), Some(s)) => {
            prop_assert!((s.extra_ms - b).abs() < 1e-9, "dp {} vs brute {}", s.extra_ms, b);
            prop_assert!(s.peak <= budget);
            prop_assert_eq!(
                s.peak,
                chain.peak(&s.plan).unwrap(),
                "reported peak is the plan's peak"
            );
        }
        (b, s) => prop_assert!(false, "brute {:?} vs dp {:?}", b, s.map(|s| s.peak)),
    }
    let least = min_peak(chain).unwrap();
    prop_assert_eq!(least.peak, lo);
    prop_assert_eq!(least.peak, chain.peak(&least.plan).unwrap());

    let most = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let limit = most * frac;
    let best = all
        .iter()
        .filter(|(_, ms)| *ms <= limit)
        .map(|(p, _)| *p)
        .min()
        .unwrap();
    let dp = min_peak_within_time(chain, limit).unwrap();
    prop_assert_eq!(dp.peak, best);
    prop_assert!(dp.extra_ms <= limit);
    prop_assert_eq!(dp.peak, chain.peak(&dp.plan).unwrap());

    let front = brute_front(&all);
    let dp_front: Vec<(u64, f64)> = pareto_front(chain)
        .unwrap()
        .iter()
        .map(|s| (s.peak, s.extra_ms))
        .collect();
    prop_assert_eq!(
        dp_front.len(),
        front.len(),
        "dp {:?} vs brute {:?}",
        dp_front,
        front
    );
    for (d, b) in dp_front.iter().zip(&front) {
        prop_assert_eq!(d.0, b.0);
        prop_assert!((d.1 - b.1).abs() < 1e-9);
    }
    Ok(())
}

/// Checks every entry point on `chain` (option times on the exact grid) against brute force
/// with limits at every plan's own peak and time, where a bound that is one byte or one
/// femtosecond too tight loses the plan: exact equality of peaks and times, and every reported
/// peak is its plan's.
fn check_every_limit(chain: &ChainModel) -> std::result::Result<(), TestCaseError> {
    let all = every_plan(chain);
    let front = brute_front(&all);
    let dp_front: Vec<(u64, f64)> = pareto_front(chain)
        .unwrap()
        .iter()
        .map(|s| (s.peak, s.extra_ms))
        .collect();
    prop_assert_eq!(&dp_front, &front);
    // Every distinct peak and time once (plans sharing one ask the same question; a chain with
    // thousands of plans has far fewer distinct figures).
    let mut peaks: Vec<u64> = all.iter().map(|p| p.0).collect();
    peaks.sort_unstable();
    peaks.dedup();
    let mut times: Vec<f64> = all.iter().map(|p| p.1).collect();
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| a.to_bits() == b.to_bits());
    for &peak in &peaks {
        let dp = least_time_within(chain, peak).unwrap();
        // The fastest plan within the budget, of equal times the lower peak.
        let brute = front.iter().rev().find(|(p, _)| *p <= peak).copied();
        prop_assert_eq!(
            dp.as_ref().map(|s| (s.peak, s.extra_ms)),
            brute,
            "budget {}",
            peak
        );
        if let Some(s) = dp {
            prop_assert_eq!(s.peak, chain.peak(&s.plan).unwrap());
        }
    }
    for &ms in &times {
        let dp = min_peak_within_time(chain, ms).unwrap();
        let brute = front.iter().find(|(_, t)| *t <= ms).copied();
        prop_assert_eq!(Some((dp.peak, dp.extra_ms)), brute, "time limit {}", ms);
        prop_assert_eq!(dp.peak, chain.peak(&dp.plan).unwrap());
    }
    let least = min_peak(chain).unwrap();
    prop_assert_eq!(Some((least.peak, least.extra_ms)), front.first().copied());
    prop_assert_eq!(least.peak, chain.peak(&least.plan).unwrap());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The least time within a budget, the least peak, the least peak within a time limit and
    /// the Pareto front equal brute force's over every plan.
    #[test]
    fn every_question_equals_brute_force(chain in arb_chain(), frac in 0.0f64..1.2) {
        check_random_limits(&chain, frac)?;
    }

    /// The same where positions depend on the path (the forward search).
    #[test]
    fn every_question_equals_brute_force_on_path_dependent_chains(
        chain in arb_chain_of(false, true),
        frac in 0.0f64..1.2,
    ) {
        check_random_limits(&chain, frac)?;
    }

    /// Limits at every plan's own peak and time, exactly.
    #[test]
    fn limits_at_every_plans_own_peak_and_time_equal_brute_force(chain in arb_chain_of(true, false)) {
        check_every_limit(&chain)?;
    }

    #[test]
    fn limits_at_every_plans_own_peak_and_time_equal_brute_force_on_path_dependent_chains(
        chain in arb_chain_of(true, true),
    ) {
        check_every_limit(&chain)?;
    }
}

/// How many of `cases` random chains fail [`check_every_limit`] with the bounds tightened by
/// `tighten` (floor raised, byte cap and time cap lowered).
fn failures_when_tightened(tighten: (u64, u64, Ticks), cases: usize) -> usize {
    let mut runner = TestRunner::deterministic();
    let strategy = arb_chain_of(true, false);
    TIGHTEN.with(|t| t.set(tighten));
    let failed = (0..cases)
        .filter(|_| {
            let chain = strategy.new_tree(&mut runner).unwrap().current();
            let outcome = std::panic::catch_unwind(|| check_every_limit(&chain));
            !matches!(outcome, Ok(Ok(())))
        })
        .count();
    TIGHTEN.with(|t| t.set((0, 0, 0)));
    failed
}

/// The bounds are as tight as they can be: the tests above fail when the lifting floor is one
/// byte higher, or the byte cap one byte or the time cap one femtosecond lower, than proven;
/// with the proven bounds every chain passes.
#[test]
fn a_bound_tightened_by_one_loses_plans_and_the_tests_see_it() {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let exact = failures_when_tightened((0, 0, 0), 64);
    let floor = failures_when_tightened((1, 0, 0), 64);
    let bytes = failures_when_tightened((0, 1, 0), 64);
    let time = failures_when_tightened((0, 0, 1), 64);
    std::panic::set_hook(hook);
    assert_eq!(exact, 0, "the proven bounds lose nothing");
    assert!(floor > 0, "a floor one byte too high goes unnoticed");
    assert!(bytes > 0, "a byte cap one byte too low goes unnoticed");
    assert!(time > 0, "a time cap one femtosecond too low goes unnoticed");
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

/// Suffixes the searches consider on `chain`: least peak, least time within a budget between
/// the least peak and storing everything, least peak within a time limit, the whole front.
fn created(chain: &ChainModel) -> u64 {
    CREATED.with(|c| c.set(0));
    let least = min_peak(chain).unwrap();
    let store = chain.peak(&chain.pick_plan(&mut |_| 0)).unwrap();
    least_time_within(chain, least.peak + (store - least.peak) / 2)
        .unwrap()
        .unwrap();
    min_peak_within_time(chain, 20.0).unwrap();
    pareto_front(chain).unwrap();
    CREATED.with(|c| c.get())
}

/// The searches scale polynomially, not exponentially, with the chain's length: four times
/// the segments consider at most 64 times the suffixes (cubic; measured: about 27 times, as
/// the front of these random figures grows about as the length to the power 1.4). Counts,
/// not times, so that the check holds on a slow debug build.
#[test]
fn the_search_scales_with_chain_length() {
    let (short, long) = (created(&long_chain(20)), created(&long_chain(80)));
    assert!(
        long <= 64 * short,
        "20 segments: {short} suffixes, 80 segments: {long}"
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

#[test]
fn negative_or_unbounded_times_are_refused_with_the_segment() {
    let chain = ChainModel {
        base: 10,
        nodes: vec![ChainNode::Segment(segment(
            "head".into(),
            vec![(50, 40, 60, 0.0), (50, 5, 70, -1.0)],
            0,
            0,
        ))],
    };
    let err = pareto_front(&chain).unwrap_err().to_string();
    assert!(err.contains("'head'") && err.contains("extra time"), "{err}");
    let err = min_peak_within_time(&long_chain(3), f64::NAN)
        .unwrap_err()
        .to_string();
    assert!(err.contains("time limit"), "{err}");
}

/// Measured chains are consistent (the backward search runs on them); a split whose children
/// hold other states than the whole is not.
#[test]
fn consistency_is_what_the_children_and_runs_hold() {
    let leaf = |p: &str, states| ChainNode::Segment(segment(p.into(), vec![(5, 5, 5, 0.0)], states, 1));
    let split = |whole_states| ChainModel {
        base: 0,
        nodes: vec![ChainNode::Splittable {
            whole: segment("b".into(), vec![(9, 9, 9, 0.0)], whole_states, 2),
            parts: vec![leaf("b.0", 3), leaf("b.1", 4)],
            runs: Vec::new(),
        }],
    };
    assert!(bounds::consistent(&split(7)).unwrap());
    assert!(!bounds::consistent(&split(8)).unwrap());
}
