//! Exact peak of one training step (SGD with momentum) of every zoo model at N=2, T=4 (default
//! sample sizes), storing everything and with every block checkpointed (bit-packed spike
//! inputs): `cargo run --release -p memopt-search --example block_peaks`.

use memopt_checkpoint::{Policy, zoo};
use memopt_profiler::Workload;
use memopt_search::report::mib;
use memopt_search::{PlanningSession, block_plan};

fn main() {
    println!("| model | input (T, N, sample) | store everything | every block checkpointed | blocks |");
    println!("|---|---|---|---|---|");
    for e in zoo::entries() {
        let mut spec = e.published.clone();
        spec.time_steps = 4;
        let workload = Workload::zoo(e.name, spec.clone(), 2);
        let mut session = PlanningSession::new(&workload).expect("session");
        let plan = block_plan(session.sites(), Policy::CHECKPOINT);
        let peak = session.exact_peak(&plan).expect("peak");
        let base = session.baseline_peak_bytes();
        println!(
            "| {} | 4, 2, {:?} | {} bytes ({}) | {} bytes ({}) | {} |",
            e.name,
            spec.sample,
            base,
            mib(base),
            peak,
            mib(peak),
            plan.entries.len()
        );
    }
}
