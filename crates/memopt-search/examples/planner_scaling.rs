//! Planning time of every strategy on every zoo model at its published size (N=16), and on a
//! generated chain of 1000 layers, against issue 14's limits: < 1 s per zoo plan, < 5 s for the
//! 1000-layer model from the start of the session (measuring every segment on Meta) to its
//! verified plan. Exits with status 1 when a time is over twice its limit (the machine may be
//! shared and noisy: the margin keeps the check about scaling, not about noise).
//!
//! `cargo run --release -p memopt-search --example planner_scaling [-- LAYERS]`

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
        ("max-overhead 20%", Box::new(MaxOverhead { max_overhead: 0.2 })),
        ("min-memory", Box::new(MinMemory)),
    ]
}

/// A chain of `layers` layers: linear-LIF pairs of width 32 on T=4, then the classifier.
fn chain_json(layers: usize) -> String {
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

fn main() {
    let layers: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let mut over = Vec::new();
    println!("| model | strategy | planning ms | limit ms |");
    println!("|---|---|---|---|");
    for entry in zoo::entries() {
        let workload = Workload::zoo(entry.name, entry.published.clone(), 16);
        let mut session = PlanningSession::new(&workload).expect("session");
        for (label, s) in strategies() {
            let ms = match session.plan(s.as_ref()) {
                Ok(r) => r.planning_ms,
                Err(e) => {
                    println!("| {} | {label} | ({e}) | 1000 |", entry.name);
                    continue;
                }
            };
            println!("| {} | {label} | {ms:.1} | 1000 |", entry.name);
            if ms > 2000.0 {
                over.push(format!("{} {label}: {ms:.0} ms", entry.name));
            }
        }
    }
    let model = Arc::new(CustomModel::from_json(&chain_json(layers)).expect("generated model"));
    let spec = model.spec().clone();
    let name = model.name().to_string();
    for (label, s) in strategies() {
        let m = model.clone();
        let sp = spec.clone();
        let workload = Workload::custom(&name, move |device, seed| m.build(&sp, device, seed), 4);
        let started = Instant::now();
        let mut session = PlanningSession::new(&workload).expect("session");
        let outcome = session.plan(s.as_ref());
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let note = outcome.err().map(|e| format!(" ({e})")).unwrap_or_default();
        println!("| {name} (session + plan) | {label} | {ms:.1}{note} | 5000 |");
        if ms > 10_000.0 {
            over.push(format!("{name} {label}: {ms:.0} ms"));
        }
    }
    if !over.is_empty() {
        eprintln!("over twice the limit: {}", over.join("; "));
        std::process::exit(1);
    }
}
