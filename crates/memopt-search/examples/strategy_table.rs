//! Prints, for each zoo model at N=2, T=4 (default sample sizes) and for the CIFAR10-DVS VGG at
//! N=32, T=10, every strategy's exact peak, predicted overhead and planning time, as markdown.
//!
//! `cargo run --release -p memopt-search --example strategy_table [-- MODEL N T]`

use memopt_checkpoint::zoo;
use memopt_profiler::Workload;
use memopt_search::report::mib;
use memopt_search::{
    Budget, BudgetKind, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, PlanningSession, Strategy,
};
use std::time::Instant;

fn strategies() -> Vec<(String, Box<dyn Strategy>)> {
    let mut v: Vec<(String, Box<dyn Strategy>)> = (1..=4)
        .map(|level| {
            let p: Box<dyn Strategy> = Box::new(Pipeline {
                level,
                ..Pipeline::default()
            });
            (format!("pipeline level {level}"), p)
        })
        .collect();
    v.push(("memonger".into(), Box::new(Memonger::default())));
    v.push((
        "budget 50%".into(),
        Box::new(BudgetStrategy::reserved(Budget::Fraction(0.5))),
    ));
    v.push((
        "budget 25%".into(),
        Box::new(BudgetStrategy::reserved(Budget::Fraction(0.25))),
    ));
    v.push(("max-overhead 20%".into(), Box::new(MaxOverhead::new(0.2))));
    v.push((
        "max-overhead 20%, least requested".into(),
        Box::new(MaxOverhead {
            max_overhead: 0.2,
            minimise: BudgetKind::Requested,
        }),
    ));
    v.push(("min-memory".into(), Box::new(MinMemory::default())));
    v.push((
        "min-memory, least requested".into(),
        Box::new(MinMemory {
            minimise: BudgetKind::Requested,
        }),
    ));
    v
}

fn table(name: &str, n: usize, t: usize) {
    let mut spec = zoo::entry(name).expect("zoo model").published;
    spec.time_steps = t;
    let workload = Workload::zoo(name, spec.clone(), n);
    let started = Instant::now();
    let mut session = PlanningSession::new(&workload).expect("session");
    let setup_ms = started.elapsed().as_secs_f64() * 1e3;
    let base = session.baseline_peak_bytes();
    println!("\n### {name}, N={n}, T={t}, sample {:?}\n", spec.sample);
    println!(
        "baseline peak {} ({base} bytes); session setup {setup_ms:.0} ms (measures every segment and option on Meta)\n",
        mib(base)
    );
    println!(
        "| strategy | reserved peak | vs baseline | requested peak | vs baseline | predicted overhead | entries | planning ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut base_reserved = None;
    for (label, s) in strategies() {
        match s.plan(&mut session) {
            Ok(r) => {
                let reserved = r.planned_peaks.reserved_bytes;
                let base_r = *base_reserved.get_or_insert(r.baseline_peaks.reserved_bytes);
                println!(
                    "| {label} | {} | {:.2}x | {} | {:.2}x | {:.1}% | {} | {:.1} |",
                    mib(reserved),
                    base_r as f64 / reserved.max(1) as f64,
                    mib(r.planned_peak_bytes),
                    r.reduction(),
                    r.predicted_overhead * 100.0,
                    r.plan.entries.len(),
                    r.planning_ms
                )
            }
            Err(e) => println!("| {label} | - | - | - | - | - | - | {e} |"),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [name, n, t] = args.as_slice() {
        table(name, n.parse().expect("N"), t.parse().expect("T"));
        return;
    }
    for e in zoo::entries() {
        table(e.name, 2, 4);
    }
    table("cifar10dvs-vgg", 32, 10);
}
