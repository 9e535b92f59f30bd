//! A custom memory optimizer composed from the public building blocks: a strategy that
//! checkpoints every other block, compared with the built-in strategies on the same session,
//! then checked with real CPU steps through the library's verification (measured peak ==
//! planned peak; loss, gradients, BatchNorm running statistics, neuron states and updated
//! parameters bit-identical to storing everything).
//!
//! `cargo run --release -p memopt-search --example every_other_block [-- MODEL N]`
//! (default: cifar10dvs-vgg at its small size, N=2). Exits non-zero when a check fails.

use memopt_search::report::mib;
use memopt_search::{
    Blocks, Budget, BudgetStrategy, Device, MaxOverhead, Memonger, MinMemory, Pipeline, PlanReport,
    PlanningSession, Policy, Result, Strategy, Workload, verify_plan,
};

/// Checkpoints blocks 0, 2, 4, ... (each block: its layers up to and including a neuron), so
/// that every other block keeps only its bit-packed input and recomputes in backward.
struct EveryOtherBlock;

impl Strategy for EveryOtherBlock {
    fn name(&self) -> String {
        "every-other-block".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let plan =
            Blocks::of(session.sites()).plan(|block| (block.index % 2 == 0).then_some(Policy::CHECKPOINT));
        session.report(&self.name(), plan)
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().map_or("cifar10dvs-vgg", String::as_str);
    let n = match args.get(1) {
        Some(s) => s
            .parse()
            .map_err(|_| format!("N must be a positive integer, got {s:?}"))?,
        None => 2,
    };
    let workload = Workload::zoo_small(model, n)?;
    let mut session = PlanningSession::new(&workload)?;
    let blocks = Blocks::of(session.sites());
    println!(
        "{}: {} blocks; baseline peak {} (storing everything)\n",
        workload.describe(),
        blocks.len(),
        mib(session.baseline_peak_bytes())
    );

    let strategies: Vec<Box<dyn Strategy>> = vec![
        Box::new(EveryOtherBlock),
        Box::new(Pipeline::default()),
        Box::new(Memonger::default()),
        Box::new(BudgetStrategy::reserved(Budget::Fraction(0.9))),
        Box::new(MaxOverhead::new(0.2)),
        Box::new(MinMemory::default()),
    ];
    println!(
        "{:<20} {:>12} {:>10} {:>10} {:>8}",
        "strategy", "peak", "reduction", "overhead", "entries"
    );
    let mut ours = None;
    for s in &strategies {
        match session.plan(s.as_ref()) {
            Ok(r) => {
                println!(
                    "{:<20} {:>12} {:>9.2}x {:>+9.1}% {:>8}",
                    r.strategy,
                    mib(r.planned_peak_bytes),
                    r.reduction(),
                    r.predicted_overhead * 100.0,
                    r.plan.entries.len()
                );
                if ours.is_none() {
                    ours = Some(r);
                }
            }
            // A strategy may legitimately find nothing (a budget below the least peak).
            Err(e) => println!("{:<20} {e}", s.name()),
        }
    }
    let ours = ours.ok_or("the every-other-block strategy returned no plan")?;

    println!("\nthe every-other-block plan:\n{}", ours.plan.to_json());
    let check = verify_plan(&workload, &ours.plan, Device::Cpu)?;
    println!("\nverified on the CPU: {}", check.summary());
    match check.failure() {
        None => Ok(()),
        Some(why) => Err(why.into()),
    }
}
