//! Times a few CPU training steps of a zoo model at its small size: `cargo run --release
//! --example step_time -p memopt-checkpoint -- cifar10dvs-vgg 2`.

use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::{Batch, StepOptions, Target, Trainer, zoo};
use memopt_core::{Device, MemoryKind, MemoryTracker, Philox, Tensor};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("cifar10dvs-vgg", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let spec = zoo::entry(name).expect("zoo model").small;
    let model = zoo::build(name, &spec, Device::Cpu, 0).expect("build");
    let mut rng = Philox::new(1);
    let dims = spec.input_dims(n);
    let input = Tensor::rand_uniform(dims, 0.0, 1.0, &mut rng, Device::Cpu, MemoryKind::Input).unwrap();
    let labels = Tensor::from_vec(
        (0..n as i64).collect::<Vec<_>>(),
        [n],
        Device::Cpu,
        MemoryKind::Input,
    )
    .unwrap();
    let batch = Batch {
        input,
        target: Target::Labels(labels),
    };
    let mut trainer = Trainer::new(Box::new(Sgd::plain(&model, 0.01).unwrap()), 0);
    for i in 0..4 {
        let t = std::time::Instant::now();
        let out = trainer.step(&model, &batch, StepOptions::default()).unwrap();
        println!(
            "step {i}: {:.1} ms, loss {:?}, peak {} bytes",
            t.elapsed().as_secs_f64() * 1e3,
            out.loss,
            MemoryTracker::current(Device::Cpu).peak_bytes()
        );
    }
}
