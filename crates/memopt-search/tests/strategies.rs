//! Every strategy's plan is verified: its exact peak is within the budget, a fresh estimator
//! agrees, and a real CPU step measures the same peak with bit-identical gradients.

use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{Plan, StepOptions};
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::{Estimator, Workload};
use memopt_search::chain::plan_entries;
use memopt_search::dp::least_time_within;
use memopt_search::{
    Budget, BudgetKind, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, PlanReport,
    PlanningSession, Prefer, Profile, SearchError, Strategy,
};

/// Peak bytes and gradient bits of one CPU step of `workload` under `plan`.
fn cpu_step(workload: &Workload, plan: &Plan) -> (u64, Vec<Vec<u32>>) {
    // Under a plan updating in backward, keeping the gradients would hold them (and raise the
    // peak): the peak comes from a step of a fresh model that keeps none.
    let peak_without_grads = plan.update_in_backward.then(|| {
        let tracker = MemoryTracker::new(Device::Cpu);
        let _installed = MemoryTracker::install(tracker.clone());
        let session = workload.instantiate(Device::Cpu, plan).unwrap();
        let (model, mut trainer, batch) = session.into_parts();
        drop(trainer.step(&model, &batch, StepOptions::default()).unwrap());
        tracker.peak_bytes()
    });
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let session = workload.instantiate(Device::Cpu, plan).unwrap();
    let (model, mut trainer, batch) = session.into_parts();
    let opts = StepOptions {
        keep_grads: true,
        ..Default::default()
    };
    let out = trainer.step(&model, &batch, opts).unwrap();
    let grads = out.grads.unwrap();
    let bits = model
        .params()
        .iter()
        .map(|(_, p)| {
            grads.get(p.id()).map_or(Vec::new(), |g| {
                g.to_vec_f32().unwrap().iter().map(|v| v.to_bits()).collect()
            })
        })
        .collect();
    drop(grads);
    (peak_without_grads.unwrap_or_else(|| tracker.peak_bytes()), bits)
}

/// Checks `report` against a fresh estimator and, given the CPU step storing everything
/// (`store`: its peak and gradient bits, from [`cpu_step`]), against a real CPU step of its plan.
fn verify(workload: &Workload, report: &PlanReport, store: Option<&(u64, Vec<Vec<u32>>)>) {
    let fresh = Estimator::new(workload)
        .unwrap()
        .peak_bytes(&report.plan)
        .unwrap();
    assert_eq!(
        fresh, report.planned_peak_bytes,
        "{}: the report's peak is the estimator's",
        report.strategy
    );
    let mut estimator = Estimator::new(workload).unwrap();
    let unbounded = estimator.peaks(&report.plan).unwrap();
    // A plan that fits a reserved budget by the allocator releasing its cache there has the
    // peaks of a step under that limit, and says what it would reserve without one.
    let levels = match report
        .budget
        .and_then(|b| b.unbounded_reserved_bytes.map(|u| (b, u)))
    {
        Some((b, u)) => {
            assert_eq!(
                u, unbounded.reserved_bytes,
                "{}: the unbounded reserved peak",
                report.strategy
            );
            assert!(
                u > b.bytes,
                "{}: only a plan over the budget needs the limit",
                report.strategy
            );
            estimator
                .peaks_within(&report.plan, b.bytes)
                .unwrap()
                .expect("fits the limit")
        }
        None => unbounded,
    };
    assert_eq!(
        levels, report.planned_peaks,
        "{}: all three levels",
        report.strategy
    );
    if let Some(b) = report.budget {
        assert!(
            b.kind.of(&report.planned_peaks) <= b.bytes,
            "{}: the {} peak fits the budget",
            report.strategy,
            b.kind
        );
    }
    assert!(report.planned_peak_bytes <= report.baseline_peak_bytes || report.plan.entries.is_empty());
    if let Some((store_peak, store_grads)) = store {
        let (peak, grads) = cpu_step(workload, &report.plan);
        assert_eq!(
            *store_peak, report.baseline_peak_bytes,
            "CPU baseline equals the estimate"
        );
        assert_eq!(
            peak, report.planned_peak_bytes,
            "{}: the CPU measures the planned peak",
            report.strategy
        );
        assert_eq!(
            &grads, store_grads,
            "{}: gradients are bit-identical to storing everything",
            report.strategy
        );
    }
}

fn strategies() -> Vec<Box<dyn Strategy>> {
    vec![
        Box::new(MinMemory::default()),
        Box::new(BudgetStrategy::reserved(Budget::Fraction(0.8))),
        Box::new(BudgetStrategy {
            budget: Budget::Fraction(0.8),
            kind: BudgetKind::Allocated,
        }),
        Box::new(BudgetStrategy {
            budget: Budget::Fraction(0.8),
            kind: BudgetKind::Requested,
        }),
        Box::new(Memonger::default()),
        Box::new(Pipeline::default()),
        Box::new(Pipeline {
            profile: Some(Profile::Exhaustive),
            ..Pipeline::default()
        }),
    ]
}

fn check_model(name: &str, n: usize, cpu: bool) {
    check_strategies(name, n, cpu, strategies());
}

/// Plans `name` (small size, batch `n`) with each of `strategies` and verifies every plan (with
/// CPU steps when `cpu`).
fn check_strategies(name: &str, n: usize, cpu: bool, strategies: Vec<Box<dyn Strategy>>) {
    let workload = Workload::zoo_small(name, n).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    assert!(
        session.chain_is_exact(),
        "{name}: the chain model reproduces the baseline"
    );
    // The CPU step storing everything is deterministic: measured once, compared with every
    // strategy's plan.
    let store = cpu.then(|| cpu_step(&workload, &Plan::store_all()));
    for s in strategies {
        match s.plan(&mut session) {
            Ok(report) => verify(&workload, &report, store.as_ref()),
            Err(SearchError::Infeasible { best, .. }) => assert!(best > 0),
            Err(e) => panic!("{name} {}: {e}", s.name()),
        }
    }
}

#[test]
fn strategies_are_verified_on_the_small_models() {
    check_model("spiking-mlp", 4, true);
    check_model("toy-if", 8, true);
}

// The VGG's CPU steps are most of this file's time: its strategies are verified in two tests
// (the first three, then the rest), so that the test threads share them.

#[test]
fn strategies_are_verified_on_the_vgg() {
    check_strategies(
        "cifar10dvs-vgg",
        2,
        true,
        strategies().into_iter().take(3).collect(),
    );
}

#[test]
fn strategies_are_verified_on_the_vgg_from_the_fourth() {
    check_strategies(
        "cifar10dvs-vgg",
        2,
        true,
        strategies().into_iter().skip(3).collect(),
    );
}

#[test]
fn strategies_are_verified_on_the_resnets() {
    check_model("sew-resnet18", 2, true);
    check_model("spiking-resnet18", 2, false);
}

#[test]
fn min_memory_is_below_every_other_plan_and_budgets_trade_time_for_memory() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 8).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let least = MinMemory::default().plan(&mut session).unwrap();
    for s in strategies() {
        if let Ok(r) = s.plan(&mut session) {
            assert!(
                least.planned_peak_bytes <= r.planned_peak_bytes,
                "{} beat min-memory",
                r.strategy
            );
        }
    }
    let reserved = |r: &PlanReport| r.planned_peaks.reserved_bytes;
    let loose = BudgetStrategy::reserved(Budget::Fraction(0.9))
        .plan(&mut session)
        .unwrap();
    let tight = BudgetStrategy::reserved(Budget::Bytes(
        reserved(&least) + (reserved(&loose) - reserved(&least)) / 4,
    ))
    .plan(&mut session)
    .unwrap();
    assert!(reserved(&tight) <= reserved(&loose));
    assert!(
        tight.predicted_overhead >= loose.predicted_overhead,
        "less memory costs more time"
    );
}

#[test]
fn an_infeasible_budget_states_the_smallest_peak_found_which_fits() {
    let workload = Workload::zoo_small("toy-if", 4).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let least = MinMemory::default().plan(&mut session).unwrap().planned_peaks;
    for kind in [BudgetKind::Reserved, BudgetKind::Allocated, BudgetKind::Requested] {
        let err = BudgetStrategy {
            budget: Budget::Bytes(1),
            kind,
        }
        .plan(&mut session)
        .unwrap_err();
        let SearchError::Infeasible { best, .. } = err else {
            panic!("{kind}: {err}")
        };
        assert!(best <= kind.of(&least), "{kind}: {best}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("the smallest {kind} peak found is {best} bytes")),
            "{msg}"
        );
        // The peak named fits (a budget there may find a plan below it).
        let fits = BudgetStrategy {
            budget: Budget::Bytes(best),
            kind,
        }
        .plan(&mut session)
        .unwrap();
        assert!(kind.of(&fits.planned_peaks) <= best, "{kind}");
    }
    assert!("40%".parse::<Budget>().is_ok() && "2GiB".parse::<Budget>().is_ok());
    let msg = "lots".parse::<Budget>().unwrap_err().to_string();
    assert!(msg.contains("2GiB") && msg.contains("40%"), "{msg}");
}

/// On a model small enough to try every plan with a Meta step, the dynamic program's plan is as
/// cheap as the cheapest plan brute force finds within each budget.
#[test]
fn dp_equals_brute_force_over_exact_peaks() {
    let workload = Workload::zoo_small("spiking-mlp", 4).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let chain = session.chain().clone();
    let all = chain.all_plans();
    assert!(all.len() > 20, "{} plans", all.len());
    let mut exact: Vec<(u64, f64)> = Vec::new();
    for p in &all {
        let plan = Plan {
            update_in_backward: false,
            version: 1,
            entries: plan_entries(p),
        };
        exact.push((
            session.exact_peak(&plan).unwrap(),
            memopt_search::chain::ChainModel::extra_ms(p),
        ));
    }
    let mut budgets: Vec<u64> = exact.iter().map(|e| e.0).collect();
    budgets.sort();
    budgets.dedup();
    for b in budgets {
        let brute = exact
            .iter()
            .filter(|e| e.0 <= b)
            .map(|e| e.1)
            .fold(f64::INFINITY, f64::min);
        let dp = least_time_within(&chain, b).unwrap().unwrap();
        assert!(
            (dp.extra_ms - brute).abs() < 1e-9,
            "budget {b}: dp {} vs brute force {brute}",
            dp.extra_ms
        );
    }
}

#[test]
fn the_pipeline_summarises_what_it_did() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 8).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let safe = Pipeline {
        profile: Some(Profile::Safe),
        ..Pipeline::default()
    }
    .plan(&mut session)
    .unwrap();
    let s = safe.summary.as_ref().unwrap();
    assert_eq!(s.wrapped, 8, "the eight VGG blocks are wrapped");
    assert!(s.steps.iter().all(|st| st.level == 1));
    let two = Pipeline {
        max_wrapped: Some(2),
        profile: Some(Profile::Safe),
        ..Pipeline::default()
    }
    .plan(&mut session)
    .unwrap();
    assert_eq!(two.summary.as_ref().unwrap().wrapped, 2);
    let memory = Pipeline {
        prefer: Prefer::Memory,
        ..Pipeline::default()
    }
    .plan(&mut session)
    .unwrap();
    let m = memory.summary.as_ref().unwrap();
    assert_eq!(m.unwrapped, 0);
    assert!(memory.planned_peak_bytes <= safe.planned_peak_bytes);
    assert!(
        m.recommendation.contains("predicted overhead"),
        "{}",
        m.recommendation
    );
    assert!(m.skipped().count() + m.applied().count() == m.steps.len());
}

/// The same plan with bit-packed saved inputs peaks lower than with f32 ones, and both peaks
/// are what the chain model composes from the measured payload sizes.
#[test]
fn bit_packing_lowers_the_optimal_vgg_peak_by_the_measured_sizes() {
    use memopt_compress::CompressorKind;
    use memopt_profiler::CostModel;
    use memopt_profiler::cost::Throughput;
    use memopt_search::builder::OptionSpace;
    let workload = Workload::zoo_small("cifar10dvs-vgg", 8).unwrap();
    let session_for = |compressor| {
        let space = OptionSpace {
            compressor,
            ..OptionSpace::default()
        };
        PlanningSession::with(
            &workload,
            space,
            CostModel::from_workload(&workload, Throughput::cpu_default()).unwrap(),
        )
        .unwrap()
    };
    let mut bits = session_for(CompressorKind::BitSpike);
    let mut null = session_for(CompressorKind::Null);
    let plan = MinMemory::default().plan(&mut bits).unwrap().plan;
    let mut as_null = plan.clone();
    for e in &mut as_null.entries {
        if let memopt_checkpoint::Policy::Checkpoint { compressor, .. } = &mut e.policy {
            *compressor = CompressorKind::Null;
        }
    }
    let (peak_bits, peak_null) = (
        bits.exact_peak(&plan).unwrap(),
        null.exact_peak(&as_null).unwrap(),
    );
    assert!(peak_bits < peak_null, "{peak_bits} vs {peak_null}");
    // The chain model that holds the plan (the session plans on several) predicts its peak.
    let predicted = |s: &PlanningSession, p: &Plan| {
        s.chains()
            .into_iter()
            .find_map(|c| c.select(p).map(|chosen| c.peak(&chosen).unwrap()))
            .expect("a chain model of the session holds the plan")
    };
    assert_eq!(predicted(&bits, &plan), peak_bits);
    assert_eq!(predicted(&null, &as_null), peak_null);
}

/// A model so small that the chain model's per-segment bookkeeping does not reproduce the
/// baseline: every strategy then decides on exact peaks of the chain's Pareto front, so storing
/// everything is always feasible and nothing is reported infeasible that is not.
#[test]
fn strategies_decide_on_exact_peaks_when_the_chain_model_is_inexact() {
    let json = r#"{"name": "one-linear", "input": {"time_steps": 1, "sample": [4], "classes": 3},
                   "layers": [{"type": "linear", "out": 3}]}"#;
    let custom = std::sync::Arc::new(CustomModel::from_json(json).unwrap());
    let spec = custom.spec().clone();
    let workload = Workload::custom("one-linear", move |d, s| custom.build(&spec, d, s), 4);
    let mut session = PlanningSession::new(&workload).unwrap();
    assert!(
        !session.chain_is_exact(),
        "this test needs a model whose chain model is inexact"
    );
    let baseline = session.baseline_peak_bytes();
    let mut all: Vec<Box<dyn Strategy>> = strategies();
    all.push(Box::new(BudgetStrategy::reserved(Budget::Bytes(
        session.baseline_peaks().reserved_bytes,
    ))));
    all.push(Box::new(MaxOverhead::new(0.2)));
    let store = cpu_step(&workload, &Plan::store_all());
    for s in all {
        match s.plan(&mut session) {
            Ok(report) => {
                assert!(report.planned_peak_bytes <= baseline, "{}", report.strategy);
                verify(&workload, &report, Some(&store));
            }
            Err(SearchError::Infeasible { budget, best, .. }) => {
                assert!(budget < best, "{}: {budget} {best}", s.name())
            }
            Err(e) => panic!("{}: {e}", s.name()),
        }
    }
    // The least reserved peak of the exact front is named, and it fits.
    let best = match BudgetStrategy::reserved(Budget::Bytes(1)).plan(&mut session) {
        Err(SearchError::Infeasible { best, .. }) => best,
        other => panic!("expected infeasible, got {other:?}"),
    };
    let fits = BudgetStrategy::reserved(Budget::Bytes(best))
        .plan(&mut session)
        .unwrap();
    assert_eq!(fits.planned_peaks.reserved_bytes, best);
}

#[test]
fn the_pipeline_wraps_a_ratio_of_the_blocks_and_stops_at_its_checkpoint_budget() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 8).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let baseline = session.baseline_peak_bytes();
    let safe = |wrap_ratio, checkpoint_budget| Pipeline {
        profile: Some(Profile::Safe),
        wrap_ratio,
        checkpoint_budget,
        ..Pipeline::default()
    };
    let quarter = safe(Some(0.25), None).plan(&mut session).unwrap();
    assert_eq!(
        quarter.summary.as_ref().unwrap().wrapped,
        2,
        "a quarter of 8 blocks"
    );
    let none = safe(Some(0.0), None).plan(&mut session).unwrap();
    assert_eq!(none.summary.as_ref().unwrap().wrapped, 0);
    // Storing everything, in the session's step (which updates in backward: below the
    // baseline, which updates after).
    let store_all = session.exact_peak(&Plan::store_all()).unwrap();
    assert!(
        store_all < baseline,
        "the update in backward holds fewer gradients"
    );
    assert_eq!(none.planned_peak_bytes, store_all);
    for bad in [-0.1, 1.5, f64::NAN] {
        let err = safe(Some(bad), None).plan(&mut session).unwrap_err();
        assert!(matches!(err, SearchError::InvalidSetting(_)), "{bad}: {err}");
        assert!(err.to_string().contains("from 0 to 1"), "{err}");
    }

    // Wrapping stops at the first step whose reserved peak is within the budget (a Meta step
    // checks it), and the budget is met.
    let all = safe(None, None).plan(&mut session).unwrap();
    let top = session.baseline_peaks().reserved_bytes;
    let budget = top - (top - all.planned_peaks.reserved_bytes) / 2;
    let stopped = safe(None, Some(Budget::Bytes(budget)))
        .plan(&mut session)
        .unwrap();
    let steps = &stopped.summary.as_ref().unwrap().steps;
    assert!(stopped.planned_peaks.reserved_bytes <= budget);
    assert!(
        steps.len() < all.summary.as_ref().unwrap().steps.len(),
        "it stopped early"
    );
}

/// Reserved bytes come in whole segments, so the fastest plan whose requested (chain) peak
/// fits a budget can reserve more than it: the budget strategy checks each candidate's
/// reserved peak with a Meta step and moves on until one fits.
#[test]
fn a_reserved_budget_is_met_where_the_fastest_requested_fit_is_over_it() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 8).unwrap();
    let mut session = PlanningSession::new(&workload).unwrap();
    let budget = MinMemory::default()
        .plan(&mut session)
        .unwrap()
        .planned_peaks
        .reserved_bytes;
    let naive = Plan {
        update_in_backward: false,
        version: 1,
        entries: plan_entries(&least_time_within(session.chain(), budget).unwrap().unwrap().plan),
    };
    let naive_reserved = session.exact_peaks(&naive).unwrap().reserved_bytes;
    assert!(
        naive_reserved > budget,
        "this test needs a budget the requested-bytes plan misses: {naive_reserved} <= {budget}"
    );
    let report = BudgetStrategy::reserved(Budget::Bytes(budget))
        .plan(&mut session)
        .unwrap();
    assert!(report.planned_peaks.reserved_bytes <= budget);
    let fit = report.budget.unwrap();
    assert_eq!((fit.bytes, fit.kind), (budget, BudgetKind::Reserved));
    assert!(fit.candidates_checked > 1, "{}", fit.candidates_checked);
    verify(&workload, &report, None);
    // The allocated budget keeps its meaning: the allocated peak fits.
    let allocated = BudgetStrategy {
        budget: Budget::Bytes(budget),
        kind: BudgetKind::Allocated,
    }
    .plan(&mut session)
    .unwrap();
    assert!(allocated.planned_peaks.allocated_bytes <= budget);
}

/// Planning for a GPU, a plan that offloads reports the host memory it holds (a Meta step's
/// host tracker, exact); on the CPU, whose host is itself, nothing is offered nor reported.
#[test]
fn plans_for_a_gpu_report_their_host_memory() {
    let mut workload = Workload::zoo_small("cifar10dvs-vgg", 4).unwrap();
    workload.target = memopt_core::Target::Cuda;
    let mut session = PlanningSession::new(&workload).unwrap();
    let least = MinMemory::default().plan(&mut session).unwrap();
    let offloads = least.plan.entries.iter().any(|e| e.policy.offloads());
    assert!(offloads, "{:?}", least.plan.entries);
    assert!(least.host_peak_bytes > 0);
    // The same plan without offloading holds the offloaded bytes on the device instead: its
    // device peak is higher and it reports no host memory.
    let kept = Plan {
        update_in_backward: false,
        entries: least
            .plan
            .entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let memopt_checkpoint::Policy::Offload {
                    compressor,
                    chunks,
                    boundaries,
                    batch_norm_inputs,
                } = e.policy
                {
                    e.policy = memopt_checkpoint::Policy::Checkpoint {
                        compressor,
                        chunks,
                        boundaries,
                        batch_norm_inputs,
                    };
                }
                e
            })
            .collect(),
        ..least.plan.clone()
    };
    let without = session.report("kept", kept).unwrap();
    assert_eq!(without.host_peak_bytes, 0);
    assert!(without.planned_peak_bytes >= least.planned_peak_bytes);
    let mut cpu = PlanningSession::new(&Workload::zoo_small("cifar10dvs-vgg", 4).unwrap()).unwrap();
    let on_cpu = MinMemory::default().plan(&mut cpu).unwrap();
    assert!(!on_cpu.plan.entries.iter().any(|e| e.policy.offloads()));
    assert_eq!(on_cpu.host_peak_bytes, 0);
}
