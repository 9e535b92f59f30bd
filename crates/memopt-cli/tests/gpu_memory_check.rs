//! Issue 16 on a GPU, without one: a step whose predicted reserved peak exceeds the GPU's free
//! memory (injected here) is refused before it runs, with both numbers and the command that
//! would fit; the CPU check compares the requested peak as before.

use memopt_checkpoint::Plan;
use memopt_cli::memory_limit::{Room, refuse_unless_fits};
use memopt_core::{Device, Target};
use memopt_profiler::{Estimator, Workload};

fn room(bytes: u64) -> Room {
    Room {
        bytes,
        source: "injected by the test".into(),
    }
}

#[test]
fn a_gpu_step_larger_than_the_free_memory_is_refused_naming_both_figures() {
    let workload = Workload::zoo_small("spiking-mlp", 4).unwrap();
    let store = Plan::store_all();
    let mut gpu = workload.clone();
    gpu.target = Target::Cuda;
    let reserved = Estimator::new(&gpu)
        .unwrap()
        .peaks(&store)
        .unwrap()
        .reserved_bytes;
    let requested = Estimator::new(&workload)
        .unwrap()
        .peaks(&store)
        .unwrap()
        .requested_bytes;
    assert!(reserved > requested, "{reserved} {requested}");

    let how = "-m spiking-mlp";
    refuse_unless_fits(&workload, &[&store], Device::Cuda(0), &room(reserved), how).unwrap();
    let e = refuse_unless_fits(&workload, &[&store], Device::Cuda(0), &room(reserved - 1), how)
        .unwrap_err()
        .to_string();
    for part in [
        format!("({reserved} bytes) at its peak"),
        "cuda:0 has only".to_string(),
        format!("({} bytes; injected by the test)", reserved - 1),
        format!(
            "memopt optimize -m spiking-mlp --device cuda:0 --budget {}",
            reserved - 1
        ),
        "--ignore-memory-limit".to_string(),
    ] {
        assert!(e.contains(&part), "{part} missing from: {e}");
    }
    // The CPU compares the requested peak, which fits in the same room.
    refuse_unless_fits(&workload, &[&store], Device::Cpu, &room(reserved - 1), how).unwrap();
    let e = refuse_unless_fits(&workload, &[&store], Device::Cpu, &room(requested - 1), how)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("({requested} bytes) at its peak")), "{e}");
    assert!(!e.contains("--device"), "{e}");
    // Meta holds no data: never refused.
    refuse_unless_fits(&workload, &[&store], Device::Meta(Target::Cuda), &room(0), how).unwrap();
}
