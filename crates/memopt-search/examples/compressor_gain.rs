//! The least peak reachable on the CIFAR10-DVS VGG when checkpointed inputs are bit-packed
//! versus kept as f32: `cargo run --release -p memopt-search --example compressor_gain [-- N T]`.

use memopt_checkpoint::zoo;
use memopt_compress::CompressorKind;
use memopt_profiler::cost::Throughput;
use memopt_profiler::{CostModel, Workload};
use memopt_search::builder::OptionSpace;
use memopt_search::report::mib;
use memopt_search::{MinMemory, PlanningSession, Strategy};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, t) = (
        args.first().copied().unwrap_or(32),
        args.get(1).copied().unwrap_or(10),
    );
    let mut spec = zoo::entry("cifar10dvs-vgg").expect("zoo").published;
    spec.time_steps = t;
    let workload = Workload::zoo("cifar10dvs-vgg", spec, n);
    for compressor in [CompressorKind::Null, CompressorKind::BitSpike] {
        let space = OptionSpace {
            compressor,
            ..OptionSpace::default()
        };
        let cost = CostModel::from_workload(&workload, Throughput::cpu_default()).expect("cost");
        let mut session = PlanningSession::with(&workload, space, cost).expect("session");
        let r = MinMemory::default().plan(&mut session).expect("plan");
        println!(
            "{:>9}: least peak {} ({} bytes), baseline {}, plan {}",
            compressor.name(),
            mib(r.planned_peak_bytes),
            r.planned_peak_bytes,
            mib(r.baseline_peak_bytes),
            r.plan
                .entries
                .iter()
                .map(|e| format!("{}={}", e.target(), e.policy))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
