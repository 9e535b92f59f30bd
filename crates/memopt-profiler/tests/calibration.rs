//! Calibration fits the cost model's factors to a measurement exactly (synthetic timings whose
//! true factors are known), transfers to other workloads as ratios, and its file format is
//! strict.

use memopt_checkpoint::{InputSpec, Plan, Policy};
use memopt_core::{Device, Phase};
use memopt_profiler::cost::{CALIBRATION_FORMAT, Calibration, ModuleCostEntry, Throughput};
use memopt_profiler::timing::ModuleTiming;
use memopt_profiler::{CostModel, TimingReport, Workload};

fn vgg() -> Workload {
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    Workload::zoo("cifar10dvs-vgg", spec, 2)
}

fn raw_ms(m: &CostModel, e: &ModuleCostEntry) -> f64 {
    1e3 * (e.flops as f64 / m.throughput.flops_per_s + e.bytes as f64 / m.throughput.bytes_per_s)
}

/// The true factors of the synthetic device: forward, backward, recompute by type.
fn truth(ty: &str) -> (f64, f64, f64) {
    match ty {
        "Conv2d" => (0.5, 0.75, 0.4),
        "BatchNorm2d" => (3.0, 2.0, 2.5),
        "LIFNode" => (4.0, 6.0, 3.0),
        _ => (1.5, 1.25, 1.0),
    }
}

fn timing(path: &str, ty: &str, phase: Phase, ms: f64) -> ModuleTiming {
    ModuleTiming {
        path: path.into(),
        module_type: ty.into(),
        phase,
        visits: 1,
        median_ms: ms,
        min_ms: ms,
        max_ms: ms,
        samples_ms: vec![ms],
    }
}

fn report(plan: Plan, step_ms: f64, modules: Vec<ModuleTiming>) -> TimingReport {
    TimingReport {
        workload: "synthetic".into(),
        device: Device::Cpu,
        plan,
        warmup_runs: 0,
        runs: 1,
        step_ms,
        step_samples_ms: vec![step_ms],
        modules,
    }
}

const OUTSIDE_FWD_MS: f64 = 3.0;
const OUTSIDE_BWD_MS: f64 = 5.0;
const OPTIMIZER_MS: f64 = 7.0;
const SAVED_INPUT_BYTES_PER_S: f64 = 2e9;

/// A step storing everything on the synthetic device.
fn baseline(m: &CostModel) -> TimingReport {
    let mut modules = Vec::new();
    let (mut fwd, mut bwd) = (0.0, 0.0);
    for e in m.modules.iter().filter(|e| e.leaf) {
        let (f, b, _) = truth(&e.module_type);
        let (tf, tb) = (f * raw_ms(m, e), b * 2.0 * raw_ms(m, e));
        fwd += tf;
        bwd += tb;
        modules.push(timing(&e.path, &e.module_type, Phase::Forward, tf));
        modules.push(timing(&e.path, &e.module_type, Phase::Backward, tb));
    }
    let (fwd, bwd) = (fwd + OUTSIDE_FWD_MS, bwd + OUTSIDE_BWD_MS);
    modules.push(timing("", "Sequential", Phase::Forward, fwd));
    modules.push(timing("", "Sequential", Phase::Backward, bwd));
    modules.push(timing("", "Sequential", Phase::Optimizer, OPTIMIZER_MS));
    report(Plan::store_all(), fwd + bwd + OPTIMIZER_MS, modules)
}

fn every_leaf(m: &CostModel) -> Plan {
    Plan::from_entries(
        m.modules
            .iter()
            .filter(|e| e.leaf)
            .map(|e| (e.path.clone(), Policy::CHECKPOINT)),
    )
}

/// The same step with every leaf checkpointed: each leaf recomputes once and its inputs are
/// saved and restored at `SAVED_INPUT_BYTES_PER_S`.
fn checkpointed(m: &CostModel, base: &TimingReport, plan: &Plan) -> TimingReport {
    let mut modules = base.modules.clone();
    let mut extra = 1e3 * m.plan_saved_input_bytes(plan) as f64 / SAVED_INPUT_BYTES_PER_S;
    for e in m.modules.iter().filter(|e| e.leaf) {
        let t = truth(&e.module_type).2 * raw_ms(m, e);
        extra += t;
        modules.push(timing(&e.path, &e.module_type, Phase::Recompute, t));
    }
    report(plan.clone(), base.step_ms + extra, modules)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn calibration_recovers_known_factors_and_predicts_the_measured_steps() {
    let mut m = CostModel::from_workload(&vgg(), Throughput::cpu_default()).unwrap();
    let base = baseline(&m);
    m.calibrate(&base);
    let plan = every_leaf(&m);
    assert!(m.plan_saved_input_bytes(&plan) > 0);
    let ckpt = checkpointed(&m, &base, &plan);
    m.calibrate_recompute(&ckpt, &plan);
    for ty in ["Conv2d", "BatchNorm2d", "LIFNode"] {
        let f = m.factors[ty];
        let (tf, tb, tr) = truth(ty);
        assert!(
            close(f.forward, tf) && close(f.backward, tb) && close(f.recompute, tr),
            "{ty}: fitted {f:?}, true ({tf}, {tb}, {tr})"
        );
    }
    assert!(close(m.forward_overhead_ms, OUTSIDE_FWD_MS));
    assert!(close(m.backward_overhead_ms, OUTSIDE_BWD_MS));
    let bytes_per_s = m.saved_input_bytes_per_s.unwrap();
    assert!((bytes_per_s / SAVED_INPUT_BYTES_PER_S - 1.0).abs() < 1e-6, "{bytes_per_s}");
    // The calibrated model predicts both measured steps.
    assert!(close(m.baseline_step_ms(), base.step_ms));
    let predicted = m.baseline_step_ms() + m.plan_extra_ms(&plan);
    assert!(
        (predicted / ckpt.step_ms - 1.0).abs() < 1e-6,
        "{predicted} vs {}",
        ckpt.step_ms
    );
    // Before the recomputation was measured, it was predicted at the forward's factor.
    let mut fresh = CostModel::from_workload(&vgg(), Throughput::cpu_default()).unwrap();
    fresh.calibrate(&base);
    assert_eq!(fresh.factors["LIFNode"].recompute, fresh.factors["LIFNode"].forward);
}

#[test]
fn a_calibration_round_trips_and_transfers_as_ratios() {
    let mut m = CostModel::from_workload(&vgg(), Throughput::cpu_default()).unwrap();
    let base = baseline(&m);
    m.calibrate(&base);
    let plan = every_leaf(&m);
    m.calibrate_recompute(&checkpointed(&m, &base, &plan), &plan);
    let c = m.calibration(Device::Cpu, "synthetic".into()).unwrap();
    assert_eq!(c.format, CALIBRATION_FORMAT);
    assert_eq!(Calibration::from_json(&c.to_json()).unwrap(), c);
    // Applied to the workload it was measured on, it gives back the fitted model's predictions.
    let mut again = CostModel::from_workload(&vgg(), Throughput::cpu_default()).unwrap();
    c.apply(&mut again);
    assert!(close(again.baseline_step_ms(), m.baseline_step_ms()));
    assert!(close(again.plan_extra_ms(&plan), m.plan_extra_ms(&plan)));
    // On a larger batch the outside time and the optimizer scale with what they are ratios of.
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    let mut bigger = CostModel::from_workload(&Workload::zoo("cifar10dvs-vgg", spec, 4), Throughput::cpu_default())
        .unwrap();
    c.apply(&mut bigger);
    assert!(bigger.forward_overhead_ms > m.forward_overhead_ms);
    assert!(close(bigger.optimizer_update_ms(), m.optimizer_update_ms()));
    assert_eq!(bigger.factors, m.factors);
}

#[test]
fn bad_calibration_files_are_refused_with_the_reason() {
    let m = CostModel::from_workload(&vgg(), Throughput::cpu_default()).unwrap();
    let good = m.calibration(Device::Cpu, "synthetic".into()).unwrap().to_json();
    let err = |text: &str| Calibration::from_json(text).unwrap_err().to_string();
    assert!(err(&good.replace("\"format\": 1", "\"format\": 2")).contains("format 2 is not supported"));
    assert!(err(&good.replace("\"backward_ratio\": 2.0", "\"backward_ratio\": -2.0")).contains("backward_ratio"));
    assert!(err(&good.replace("\"format\": 1,", "\"format\": 1, \"extra\": 1,")).contains("extra"));
    assert!(err(&good.replace("\"format\": 1,", "\"format\": 1, \"format\": 1,")).contains("format"));
    assert!(err("[]").contains("not a calibration file"));
}
