use memopt_checkpoint::{InputSpec, Plan};
use memopt_core::Device;
use memopt_profiler::Workload;
use std::time::Instant;

fn cpu_ns() -> u64 {
    // Sum of every thread's run time (ns) from schedstat.
    let mut total = 0;
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = e.unwrap().path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(p) {
            total += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
        }
    }
    total
}

fn main() {
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    let w = Workload::zoo("cifar10dvs-vgg", spec, 2);
    let mut s = w.instantiate(Device::Cpu, &Plan::store_all()).unwrap();
    s.step().unwrap();
    for _ in 0..8 {
        let (c0, t0) = (cpu_ns(), Instant::now());
        s.step().unwrap();
        let (c1, t1) = (cpu_ns(), t0.elapsed());
        println!(
            "wall {:.0} ms  cpu {:.0} ms",
            t1.as_secs_f64() * 1e3,
            (c1 - c0) as f64 / 1e6
        );
    }
}
