use memopt_checkpoint::{InputSpec, Plan};
use memopt_core::{Device, Phase};
use memopt_profiler::cost::{Calibration, Throughput};
use memopt_profiler::timing::median;
use memopt_profiler::{CostModel, TimingProfiler, Workload};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cal = Calibration::from_json(&std::fs::read_to_string(&args[1]).unwrap()).unwrap();
    let plan_text = std::fs::read_to_string(&args[2]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&plan_text).unwrap();
    let plan: Plan =
        serde_json::from_value(serde_json::json!({"version": v["version"], "entries": v["entries"]}))
            .unwrap();
    let rounds: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(9);
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    let w = Workload::zoo("cifar10dvs-vgg", spec, 2);
    let mut m = CostModel::from_workload(&w, Throughput::cpu_default()).unwrap();
    cal.apply(&mut m);
    println!(
        "predicted overhead {:.3}, extra {:.1} ms, base {:.1} ms",
        m.plan_overhead(&plan),
        m.plan_extra_ms(&plan),
        m.baseline_step_ms()
    );
    for e in &plan.entries {
        let p = if let Some([a, _]) = e.children {
            format!("{}.{}", e.path, a)
        } else {
            e.path.clone()
        };
        println!(
            "  entry {} {:?}: recompute {:.1} saved {:.2}",
            e.path,
            e.children,
            m.recompute_ms(&e.path),
            m.saved_input_ms(&p, e.policy)
        );
    }
    let r = TimingProfiler::new(1, rounds)
        .profile_plans(&w, &[Plan::store_all(), plan.clone()], Device::Cpu)
        .unwrap();
    let ph = |x: &memopt_profiler::TimingReport, p: Phase| x.median_ms("", p);
    for (name, x) in [("store", &r[0]), ("plan", &r[1])] {
        let min = x.step_samples_ms.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{name}: step med {:.1} min {:.1} | fwd {:.1} bwd {:.1} rec {:.1} opt {:.1}",
            x.step_ms,
            min,
            ph(x, Phase::Forward),
            ph(x, Phase::Backward),
            ph(x, Phase::Recompute),
            ph(x, Phase::Optimizer)
        );
        for e in &plan.entries {
            println!(
                "    {}: fwd {:.1} bwd {:.1} rec {:.1}",
                e.path,
                x.median_ms(&e.path, Phase::Forward),
                x.median_ms(&e.path, Phase::Backward),
                x.median_ms(&e.path, Phase::Recompute)
            );
        }
    }
    let ratios: Vec<f64> = r[1]
        .step_samples_ms
        .iter()
        .zip(&r[0].step_samples_ms)
        .map(|(p, b)| p / b - 1.0)
        .collect();
    let mn = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "ratios {:?}",
        ratios
            .iter()
            .map(|x| (x * 1000.0).round() / 10.0)
            .collect::<Vec<_>>()
    );
    println!(
        "measured: median ratio {:.3}, ratio of mins {:.3}, ratio of medians {:.3}",
        median(&ratios),
        mn(&r[1].step_samples_ms) / mn(&r[0].step_samples_ms) - 1.0,
        r[1].step_ms / r[0].step_ms - 1.0
    );
}
