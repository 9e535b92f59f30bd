//! The memory report of one training step of the CIFAR10-DVS VGG (SpikingJelly's memopt
//! example) at N=2, T=4, 48x48, storing everything: measured on the CPU and estimated on Meta.
//!
//! `cargo run -p memopt-profiler --example vgg_report --release [-- N T [json|csv]]`

use memopt_checkpoint::{InputSpec, Plan};
use memopt_core::Device;
use memopt_profiler::{Estimator, Workload, profile_memory};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(2), |s| s.parse())?;
    let t: usize = args.get(1).map_or(Ok(4), |s| s.parse())?;
    let spec = InputSpec {
        time_steps: t,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    let workload = Workload::zoo("cifar10dvs-vgg", spec, n);
    let plan = Plan::store_all();

    let t0 = Instant::now();
    let measured = profile_memory(&workload, &plan, Device::Cpu)?;
    let cpu_s = t0.elapsed().as_secs_f64();

    let mut estimator = Estimator::new(&workload)?;
    let t1 = Instant::now();
    let estimated = estimator.peak_bytes(&plan)?;
    let meta_ms = t1.elapsed().as_secs_f64() * 1e3;

    match args.get(2).map(String::as_str) {
        Some("json") => println!("{}", measured.to_json()),
        Some("csv") => print!("{}", measured.timeline_csv()),
        _ => {
            print!("{}", measured.table(5, false));
            println!(
                "\nCPU step measured in {cpu_s:.2} s; Meta estimate {estimated} bytes in {meta_ms:.2} ms ({})",
                if estimated == measured.peak_bytes {
                    "equal to the byte"
                } else {
                    "DIFFERENT"
                }
            );
        }
    }
    Ok(())
}
