//! The memory report is internally consistent (per-module figures against the global ones, the
//! timeline against the peak), agrees with a naive recomputation from the raw event stream, and
//! keeps nested modules' figures independent.

mod common;

use common::{SHAPE_ONLY, random_plan, without_device_and_time};
use memopt_checkpoint::module::Module;
use memopt_checkpoint::module::PlannerHints;
use memopt_checkpoint::{Cx, Plan, Policy, PolicyTable, Recording, Var};
use memopt_core::memory::{
    AllocationId, MemoryAction, MemoryEvent, MemorySubscriber, ScopeEvent, ScopeListener, add_scope_listener,
    current_scope, enter_scope,
};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Phase, Philox, Scope, Tensor};
use memopt_profiler::memory::{MemoryRecorder, ModuleMemory, profile_session};
use memopt_profiler::{MemoryReport, Workload, profile_memory};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

fn direct_children<'a>(r: &'a MemoryReport, m: &ModuleMemory) -> Vec<&'a ModuleMemory> {
    r.modules
        .iter()
        .filter(|c| c.phase == m.phase && !c.path.is_empty())
        .filter(|c| {
            if m.path.is_empty() {
                !c.path.contains('.')
            } else {
                c.path
                    .strip_prefix(&m.path)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|rest| !rest.contains('.'))
            }
        })
        .collect()
}

fn check_consistent(r: &MemoryReport) {
    let what = format!("{} / plan {}", r.workload, r.plan.to_json());
    // Every allocation is attributed to exactly one (path, phase).
    let own: u64 = r.modules.iter().map(|m| m.self_allocated_bytes).sum();
    assert_eq!(own, r.total_allocated_bytes, "{what}");
    for m in &r.modules {
        let children = direct_children(r, m);
        let sum: u64 = children.iter().map(|c| c.allocated_bytes).sum();
        assert_eq!(
            m.allocated_bytes,
            m.self_allocated_bytes + sum,
            "{what}: {} {}",
            m.path,
            m.phase
        );
        let saved: u64 = children.iter().map(|c| c.saved_bytes).sum();
        assert!(m.saved_bytes >= saved, "{what}: {} {}", m.path, m.phase);
        let packed: u64 = children.iter().map(|c| c.packed_bytes).sum();
        assert!(m.packed_bytes >= packed, "{what}: {} {}", m.path, m.phase);
        for c in children {
            assert!(
                c.peak_bytes <= m.peak_bytes,
                "{what}: {} inside {}",
                c.path,
                m.path
            );
        }
        assert!(
            m.held_at_exit_bytes <= m.allocated_bytes,
            "{what}: {} {}",
            m.path,
            m.phase
        );
        assert!(m.peak_bytes <= r.peak_bytes, "{what}: {} {}", m.path, m.phase);
        assert!(m.visits >= 1, "{what}: {} {}", m.path, m.phase);
    }
    // The phase roots partition the step; the peak is reached inside one of them.
    let roots: Vec<&ModuleMemory> = r.modules.iter().filter(|m| m.path.is_empty()).collect();
    assert_eq!(
        roots.iter().map(|m| m.allocated_bytes).sum::<u64>(),
        r.total_allocated_bytes
    );
    assert_eq!(
        roots.iter().map(|m| m.peak_bytes).max(),
        Some(r.peak_bytes),
        "{what}"
    );
    assert_eq!(
        r.module(&r.peak_path, r.peak_phase).unwrap().peak_bytes,
        r.peak_bytes
    );
    // Who holds the peak.
    assert_eq!(r.by_kind.total(), r.peak_bytes, "{what}");
    assert_eq!(
        r.holders.iter().map(|h| h.bytes).sum::<u64>(),
        r.peak_bytes,
        "{what}"
    );
    let merged = r
        .holders
        .iter()
        .fold(memopt_profiler::memory::KindBytes::default(), |acc, h| {
            acc.plus(&h.by_kind)
        });
    assert_eq!(merged, r.by_kind, "{what}");
    assert!(r.holders.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    // The timeline.
    let max = r
        .timeline
        .iter()
        .map(|p| p.current_bytes)
        .max()
        .unwrap_or(r.baseline_bytes);
    assert_eq!(
        max.max(r.baseline_bytes),
        r.peak_bytes,
        "{what}: timeline maximum"
    );
    let at = r.peak_event.map(|e| r.timeline[e as usize].current_bytes);
    assert_eq!(at, Some(r.peak_bytes));
    assert!(r.timeline.iter().enumerate().all(|(i, p)| p.event == i as u64));
    assert_eq!(r.timeline.last().map(|p| p.current_bytes), Some(r.final_bytes));
}

/// Profiles one CPU step of `model` (small size, N=2) under `plan`; its per-module figures sum
/// to the global ones.
fn check_consistent_under(model: &str, plan: &Plan) {
    let workload = Workload::zoo_small(model, 2).unwrap();
    let report = profile_memory(&workload, plan, Device::Cpu).unwrap();
    check_consistent(&report);
}

// One test per CIFAR10-DVS VGG case (each a CPU step at 2x48x48), so that the test threads
// share them.

#[test]
fn per_module_figures_sum_to_the_global_figures() {
    check_consistent_under("cifar10dvs-vgg", &Plan::store_all());
}

#[test]
fn per_module_figures_sum_to_the_global_figures_under_checkpoints_and_offload() {
    check_consistent_under(
        "cifar10dvs-vgg",
        &Plan::from_entries([
            ("features.1", Policy::CHECKPOINT),
            (
                "features.2.neuron",
                Policy::offload(memopt_compress::CompressorKind::U8, 1),
            ),
            ("features", Policy::CHECKPOINT),
        ]),
    );
}

#[test]
fn per_module_figures_sum_to_the_global_figures_on_the_small_models() {
    check_consistent_under(
        "toy-if",
        &Plan::from_entries([
            (
                "0",
                Policy::checkpoint(memopt_compress::CompressorKind::BitSpike, 3),
            ),
            ("0.1", Policy::CHECKPOINT),
        ]),
    );
    check_consistent_under("spiking-mlp", &Plan::from_entries([("", Policy::CHECKPOINT)]));
}

#[test]
fn the_timeline_maximum_is_the_peak_and_exports_as_csv() {
    let workload = Workload::zoo_small("toy-if", 2).unwrap();
    let r = profile_memory(&workload, &Plan::store_all(), Device::Cpu).unwrap();
    assert_eq!(
        r.timeline.iter().map(|p| p.current_bytes).max(),
        Some(r.peak_bytes)
    );
    assert_eq!(r.baseline_bytes, 0);
    let csv = r.timeline_csv();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "event,time_ns,current_bytes");
    assert_eq!(lines.len(), r.timeline.len() + 1);
    let max_csv = lines[1..]
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .max();
    assert_eq!(max_csv, Some(r.peak_bytes));
    let times: Vec<u64> = lines[1..]
        .iter()
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "time never goes back");
}

#[test]
fn the_report_round_trips_through_json_with_stable_field_names() {
    let workload = Workload::zoo_small("spiking-mlp", 2).unwrap();
    let r = profile_memory(
        &workload,
        &Plan::from_entries([("1", Policy::CHECKPOINT)]),
        Device::Cpu,
    )
    .unwrap();
    let json = r.to_json();
    for field in [
        "\"peak_bytes\"",
        "\"by_kind\"",
        "\"saved_for_backward\"",
        "\"optimizer_state\"",
        "\"modules\"",
        "\"allocated_bytes\"",
        "\"held_at_exit_bytes\"",
        "\"saved_bytes\"",
        "\"timeline\"",
        "\"current_bytes\"",
        "\"time_ns\"",
        "\"phase\": \"recompute\"",
    ] {
        assert!(json.contains(field), "{field} missing from the JSON");
    }
    assert_eq!(MemoryReport::from_json(&json).unwrap(), r);
    assert!(MemoryReport::from_json("{}").is_err());
    let table = r.to_string();
    assert!(table.contains("peak:") && table.contains("by kind at the peak") && table.contains("recompute"));
}

/// The peak's breakdown names what holds memory: every parameter, the optimizer state (one SGD
/// momentum buffer per parameter), the batch, and the modules that own parameters.
#[test]
fn the_peak_breakdown_accounts_for_the_persistent_state() {
    let workload = Workload::zoo_small("cifar10dvs-vgg", 2).unwrap();
    let r = profile_memory(&workload, &Plan::store_all(), Device::Cpu).unwrap();
    let model = workload.build_model(Device::META).unwrap();
    let params: u64 = model.params().iter().map(|(_, p)| p.tensor().view_bytes()).sum();
    let buffers: u64 = model.buffers().iter().map(|(_, b)| b.tensor().view_bytes()).sum();
    assert_eq!(r.by_kind.get(MemoryKind::Parameter), params);
    assert_eq!(r.by_kind.get(MemoryKind::Buffer), buffers);
    assert_eq!(r.by_kind.get(MemoryKind::OptimizerState), params);
    let input = 4 * 2 * 2 * 48 * 48 * 4 + 2 * 8;
    assert_eq!(r.by_kind.get(MemoryKind::Input), input);
    let conv = r
        .holders
        .iter()
        .find(|h| h.path == "features.0.proj_bn.0")
        .unwrap();
    assert_eq!(conv.by_kind.get(MemoryKind::Parameter), 4 * (64 * 2 * 9 + 64));
    let root = r.holders.iter().find(|h| h.path.is_empty()).unwrap();
    assert_eq!(root.by_kind.get(MemoryKind::OptimizerState), params);
    assert_eq!(r.top_modules(5).len(), 5);
    assert!(r.top_modules(5).iter().all(|h| !h.path.is_empty()));
}

/// Profiling an existing session reports what was held before as the baseline, with the same
/// peak as a profile that built everything inside its tracker.
#[test]
fn profiling_an_existing_session_reports_its_baseline() {
    let workload = Workload::zoo_small("toy-if", 2).unwrap();
    let full = profile_memory(&workload, &Plan::store_all(), Device::Cpu).unwrap();
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload.instantiate(Device::Cpu, &Plan::store_all()).unwrap();
    let held = tracker.current_bytes();
    let r = profile_session(&mut session, "toy-if").unwrap();
    assert_eq!(r.baseline_bytes, held);
    assert_eq!(r.peak_bytes, full.peak_bytes);
    assert_eq!(r.final_bytes, held);
    let before = r.holders.iter().find(|h| h.path == "(before recording)").unwrap();
    assert_eq!(before.bytes, held);
    assert!(r.top_modules(100).iter().all(|h| h.path != "(before recording)"));
    assert_eq!(r.holders.iter().map(|h| h.bytes).sum::<u64>(), r.peak_bytes);
}

// ---- nested modules ------------------------------------------------------------------------

fn zeros(elems: usize, kind: MemoryKind) -> Tensor {
    Tensor::zeros([elems], DType::F32, Device::META, kind).unwrap()
}

/// Allocates a 400-byte output and a 200-byte temporary it frees.
struct Leaf;

impl Module for Leaf {
    fn type_name(&self) -> &'static str {
        "Leaf"
    }
    fn forward<'m>(&'m self, _cx: &mut Cx<'m>, _inputs: Vec<Var>) -> memopt_checkpoint::Forward<Vec<Var>> {
        let out = zeros(100, MemoryKind::Activation);
        drop(zeros(50, MemoryKind::Workspace));
        Ok(vec![Var::constant(out)])
    }
}

impl PlannerHints for Leaf {}

/// Calls a leaf, then allocates 800 bytes it keeps.
struct Inner {
    leaf: Leaf,
}

impl Module for Inner {
    fn type_name(&self) -> &'static str {
        "Inner"
    }
    fn forward<'m>(&'m self, cx: &mut Cx<'m>, _inputs: Vec<Var>) -> memopt_checkpoint::Forward<Vec<Var>> {
        let mut out = cx.call("leaf", &self.leaf, vec![])?;
        out.push(Var::constant(zeros(200, MemoryKind::Activation)));
        Ok(out)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("leaf".into(), &self.leaf)]
    }
}

impl PlannerHints for Inner {}

/// Holds 40 bytes while calling `inner` and then a sibling leaf; frees them before returning.
struct Outer {
    inner: Inner,
    sibling: Leaf,
}

impl Module for Outer {
    fn type_name(&self) -> &'static str {
        "Outer"
    }
    fn forward<'m>(&'m self, cx: &mut Cx<'m>, _inputs: Vec<Var>) -> memopt_checkpoint::Forward<Vec<Var>> {
        let temp = zeros(10, MemoryKind::Workspace);
        let mut out = cx.call("inner", &self.inner, vec![])?;
        out.extend(cx.call("sibling", &self.sibling, vec![])?);
        drop(temp);
        Ok(out)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("inner".into(), &self.inner), ("sibling".into(), &self.sibling)]
    }
}

impl PlannerHints for Outer {}

/// A parent's figures include its children's, and no child resets or double counts them (the
/// flaw of hook profilers that keep one shared counter). Expected figures by hand:
///
/// ```text
/// outer: +40                                  current 40
///   inner.leaf: +400 +200 -200                current 440, peak 640
///   inner: +800                               current 1240
///   sibling: +400 +200 -200                   current 1640, peak 1840
/// outer: -40                                  current 1600
/// ```
#[test]
fn nested_modules_do_not_corrupt_each_other() {
    let tracker = MemoryTracker::new(Device::META);
    let _installed = MemoryTracker::install(tracker.clone());
    let outer = Outer {
        inner: Inner { leaf: Leaf },
        sibling: Leaf,
    };
    let table = PolicyTable::default();
    let recorder = MemoryRecorder::start(&tracker);
    let outputs = {
        let _fwd = enter_scope(Scope::new("", Phase::Forward));
        let mut cx = Cx::new(Device::META, &table, Philox::new(0), Recording::Off, true);
        cx.call("outer", &outer, vec![]).unwrap()
    };
    let r = recorder.finish("nested", Plan::store_all());
    drop(outputs);
    let fig = |p: &str| {
        let m = r.module(p, Phase::Forward).unwrap();
        (
            m.allocated_bytes,
            m.self_allocated_bytes,
            m.held_at_exit_bytes,
            m.peak_bytes,
            m.visits,
        )
    };
    assert_eq!(fig("outer.inner.leaf"), (600, 600, 400, 640, 1));
    assert_eq!(fig("outer.inner"), (1400, 800, 1200, 1240, 1));
    assert_eq!(fig("outer.sibling"), (600, 600, 400, 1840, 1));
    assert_eq!(fig("outer"), (2040, 40, 1600, 1840, 1));
    assert_eq!(fig("").0, 2040);
    assert_eq!(r.peak_bytes, 1840);
    assert_eq!(
        (r.peak_path.as_str(), r.peak_phase),
        ("outer.sibling", Phase::Forward)
    );
    assert_eq!(r.final_bytes, 1600);
    let holders: HashMap<&str, u64> = r.holders.iter().map(|h| (h.path.as_str(), h.bytes)).collect();
    assert_eq!(holders["outer.inner.leaf"], 400);
    assert_eq!(holders["outer.inner"], 800);
    assert_eq!(
        holders["outer.sibling"], 600,
        "the temporary is alive at the peak"
    );
    assert_eq!(holders["outer"], 40);
    check_consistent(&r);
}

// ---- against a naive recomputation ----------------------------------------------------------

#[derive(Debug, Clone)]
enum Raw {
    /// The current scope after a transition.
    Scope(Scope),
    Event {
        action: MemoryAction,
        id: AllocationId,
        bytes: u64,
        kind: MemoryKind,
        scope: Scope,
        current: u64,
    },
}

#[derive(Default)]
struct RawLog(Mutex<Vec<Raw>>);

impl MemorySubscriber for RawLog {
    fn on_event(&self, e: &MemoryEvent) {
        self.0.lock().unwrap().push(Raw::Event {
            action: e.action,
            id: e.allocation,
            bytes: e.bytes,
            kind: e.kind,
            scope: e.scope.clone(),
            current: e.current_bytes,
        });
    }
}

struct RawScopes(Arc<RawLog>);

impl ScopeListener for RawScopes {
    fn on_scope(&self, e: &ScopeEvent<'_>) {
        self.0.0.lock().unwrap().push(Raw::Scope(e.current.clone()));
    }
}

fn belongs(scope: &Scope, path: &str, phase: Phase) -> bool {
    scope.phase() == phase
        && (path.is_empty()
            || scope.path() == path
            || scope
                .path()
                .strip_prefix(path)
                .is_some_and(|r| r.starts_with('.')))
}

/// (allocated, held at exit, peak, saved, visits) of one key, straight from the definitions:
/// scan the log, tracking whether the current scope is inside the key.
fn naive(log: &[Raw], path: &str, phase: Phase) -> (u64, u64, u64, u64, u64) {
    let (mut allocated, mut held, mut peak, mut saved, mut visits) = (0, 0, 0, 0, 0);
    let mut current = 0;
    let mut visit: Option<(HashMap<AllocationId, u64>, u64)> = None;
    let mut close = |v: Option<(HashMap<AllocationId, u64>, u64)>, held: &mut u64, peak: &mut u64| {
        if let Some((alive, p)) = v {
            *held += alive.values().sum::<u64>();
            *peak = (*peak).max(p);
            visits += 1;
        }
    };
    for raw in log {
        match raw {
            Raw::Scope(s) => {
                let inside = belongs(s, path, phase);
                if inside && visit.is_none() {
                    visit = Some((HashMap::new(), current));
                } else if !inside {
                    close(visit.take(), &mut held, &mut peak);
                }
            }
            Raw::Event {
                action,
                id,
                bytes,
                kind,
                scope,
                current: after,
            } => {
                current = *after;
                let mine = belongs(scope, path, phase);
                match action {
                    MemoryAction::Alloc if mine => {
                        allocated += bytes;
                        if *kind == MemoryKind::SavedForBackward {
                            saved += bytes;
                        }
                        if let Some((alive, _)) = visit.as_mut() {
                            alive.insert(*id, *bytes);
                        }
                    }
                    MemoryAction::Free => {
                        if let Some((alive, _)) = visit.as_mut() {
                            alive.remove(id);
                        }
                    }
                    MemoryAction::Retag { .. } if mine && *kind == MemoryKind::SavedForBackward => {
                        saved += bytes
                    }
                    _ => {}
                }
                if let Some((_, p)) = visit.as_mut() {
                    *p = (*p).max(current);
                }
            }
        }
    }
    close(visit.take(), &mut held, &mut peak);
    (allocated, held, peak, saved, visits)
}

fn check_against_naive(workload: &Workload, plan: &Plan) -> Result<(), TestCaseError> {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let raw = Arc::new(RawLog::default());
    raw.0.lock().unwrap().push(Raw::Scope(current_scope()));
    let _sub = tracker.subscribe(raw.clone());
    let _listen = add_scope_listener(Rc::new(RawScopes(raw.clone())));
    let recorder = MemoryRecorder::start(&tracker);
    let mut session = workload.instantiate(Device::Cpu, plan).unwrap();
    recorder.attribute_model(session.model());
    session.step().unwrap();
    let r = recorder.finish(workload.describe(), plan.clone());
    let log = raw.0.lock().unwrap().clone();
    let keys: HashSet<(String, Phase)> = r.modules.iter().map(|m| (m.path.clone(), m.phase)).collect();
    prop_assert_eq!(keys.len(), r.modules.len(), "one entry per (path, phase)");
    for m in &r.modules {
        let got = (
            m.allocated_bytes,
            m.held_at_exit_bytes,
            m.peak_bytes,
            m.saved_bytes,
            m.visits,
        );
        prop_assert_eq!(
            got,
            naive(&log, &m.path, m.phase),
            "{} {} under {}",
            m.path,
            m.phase,
            plan.to_json()
        );
    }
    check_consistent(&r);
    let direct = profile_memory(workload, plan, Device::Cpu).unwrap();
    prop_assert_eq!(without_device_and_time(&direct), without_device_and_time(&r));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn module_figures_match_a_naive_recomputation_under_random_plans(
        model in prop::sample::select(vec!["spiking-mlp", "toy-if"]),
        picks in proptest::collection::vec(0u32..4096, 1..24),
    ) {
        let workload = Workload::zoo_small(model, 2).unwrap();
        let probe = workload.build_model(Device::META).unwrap();
        let plan = random_plan(&probe, &picks, &SHAPE_ONLY);
        check_against_naive(&workload, &plan)?;
    }
}
