//! Planning time of every strategy on every zoo model at its published size (N=16), and on two
//! generated chains of 1000 layers, against issue 14's limits: < 1 s per zoo plan, < 5 s for a
//! 1000-layer model from the start of the session (measuring every segment on Meta) to its
//! verified plan. The chains are a linear-LIF chain (its peak is set by its parameters, so
//! every budget is loose) and a conv-LIF chain (its peak is its activations, so budgets bind
//! at every layer and the fronts of plans are long). Times are wall-clock, with the process's
//! CPU time (all threads) beside them (the machine may be shared). Exits with status 1 when a wall time is
//! over twice its limit (the margin keeps the check about scaling, not about noise).
//!
//! `cargo run --release -p memopt-search --example planner_scaling [-- LAYERS]`
//! `cargo run --release -p memopt-search --example planner_scaling -- LAYERS --write DIR`
//! writes the two generated models as JSON into DIR (for `memopt optimize --model FILE.json`).

use memopt_checkpoint::zoo::{self, custom::CustomModel};
use memopt_profiler::Workload;
use memopt_search::{
    Budget, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, PlanningSession, Strategy,
};
use std::sync::Arc;
use std::time::Instant;

fn strategies() -> Vec<(&'static str, Box<dyn Strategy>)> {
    vec![
        ("pipeline", Box::new(Pipeline::default())),
        ("memonger", Box::new(Memonger::default())),
        (
            "budget 90%",
            Box::new(BudgetStrategy::reserved(Budget::Fraction(0.9))),
        ),
        ("max-overhead 20%", Box::new(MaxOverhead::new(0.2))),
        ("min-memory", Box::new(MinMemory::default())),
    ]
}

/// A chain of `layers` layers: linear-LIF pairs of width 32 on T=4, then the classifier.
fn linear_chain(layers: usize) -> String {
    let mut body = Vec::new();
    while body.len() + 1 < layers {
        body.push(r#"{"type":"linear","out":32}"#);
        body.push(r#"{"type":"lif"}"#);
    }
    body.truncate(layers.saturating_sub(1));
    body.push(r#"{"type":"linear","out":10}"#);
    format!(
        r#"{{"name":"chain{layers}","input":{{"time_steps":4,"sample":[32],"classes":10,"spikes":true}},"layers":[{}]}}"#,
        body.join(",")
    )
}

/// A chain of `layers` layers: conv-LIF pairs of 8 channels at 16x16 on T=4, then the
/// classifier.
fn conv_chain(layers: usize) -> String {
    let mut body = Vec::new();
    while body.len() + 3 < layers {
        body.push(r#"{"type":"conv2d","out":8,"kernel":3,"padding":1}"#);
        body.push(r#"{"type":"lif"}"#);
    }
    body.truncate(layers.saturating_sub(2));
    body.push(r#"{"type":"flatten"}"#);
    body.push(r#"{"type":"linear","out":10}"#);
    format!(
        r#"{{"name":"conv{layers}","input":{{"time_steps":4,"sample":[8,16,16],"classes":10,"spikes":true}},"layers":[{}]}}"#,
        body.join(",")
    )
}

/// CPU time of this process so far (every thread's, those that ended included: a session
/// measures its segments on several threads), in ms, at the kernel's tick resolution
/// (usually 10 ms); `None` where the kernel does not say.
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces, hence the last ')'): utime and
    // stime are the 12th and 13th.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 1e3 / TICKS_PER_S)
}

/// The kernel's clock ticks per second for process times (USER_HZ: 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// Wall and CPU ms of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64, Option<f64>) {
    let (started, cpu) = (Instant::now(), cpu_ms());
    let out = f();
    let cpu = cpu.zip(cpu_ms()).map(|(a, b)| b - a);
    (out, started.elapsed().as_secs_f64() * 1e3, cpu)
}

fn cpu_text(cpu: Option<f64>) -> String {
    cpu.map_or("-".into(), |c| format!("{c:.0}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layers: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let chains = [linear_chain(layers), conv_chain(layers)];
    if let Some(at) = args.iter().position(|a| a == "--write") {
        let dir = std::path::PathBuf::from(args.get(at + 1).expect("--write DIR"));
        std::fs::create_dir_all(&dir).expect("the output folder");
        for json in &chains {
            let model = CustomModel::from_json(json).expect("generated model");
            let path = dir.join(format!("{}.json", model.name()));
            std::fs::write(&path, json).expect("writing the model");
            println!("{}", path.display());
        }
        return;
    }
    let mut over = Vec::new();
    println!("| model | strategy | session ms (cpu) | planning ms (cpu) | limit ms |");
    println!("|---|---|---|---|---|");
    for entry in zoo::entries() {
        let workload = Workload::zoo(entry.name, entry.published.clone(), 16);
        let (session, setup_ms, setup_cpu) = timed(|| PlanningSession::new(&workload));
        let mut session = session.expect("session");
        for (label, s) in strategies() {
            let (outcome, ms, cpu) = timed(|| session.plan(s.as_ref()));
            let note = outcome.err().map(|e| format!(" ({e})")).unwrap_or_default();
            println!(
                "| {} | {label} | {setup_ms:.0} ({}) | {ms:.1} ({}){note} | 1000 |",
                entry.name,
                cpu_text(setup_cpu),
                cpu_text(cpu)
            );
            if ms > 2000.0 {
                over.push(format!("{} {label}: {ms:.0} ms", entry.name));
            }
        }
    }
    println!();
    println!("| model | strategy | session + plan ms (cpu) | of which planning ms | limit ms |");
    println!("|---|---|---|---|---|");
    for json in &chains {
        let model = Arc::new(CustomModel::from_json(json).expect("generated model"));
        let spec = model.spec().clone();
        let name = model.name().to_string();
        for (label, s) in strategies() {
            let m = model.clone();
            let sp = spec.clone();
            let workload = Workload::custom(&name, move |device, seed| m.build(&sp, device, seed), 4);
            let ((outcome, plan_ms), ms, cpu) = timed(|| {
                let mut session = PlanningSession::new(&workload).expect("session");
                let (outcome, plan_ms, _) = timed(|| session.plan(s.as_ref()));
                (outcome, plan_ms)
            });
            let note = outcome.err().map(|e| format!(" ({e})")).unwrap_or_default();
            println!(
                "| {name} | {label} | {ms:.0} ({}){note} | {plan_ms:.0} | 5000 |",
                cpu_text(cpu)
            );
            if ms > 10_000.0 {
                over.push(format!("{name} {label}: {ms:.0} ms"));
            }
        }
    }
    if !over.is_empty() {
        eprintln!("over twice the limit: {}", over.join("; "));
        std::process::exit(1);
    }
}
