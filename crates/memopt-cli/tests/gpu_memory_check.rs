//! Issue 16 on a GPU, without one: a step whose predicted reserved peak exceeds the GPU's free
//! memory (injected here) is refused before it runs, with both numbers and the command that
//! would fit; the CPU check compares the reserved peak of the CPU target the same way.

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

fn reserved_peak(workload: &Workload, target: Target) -> u64 {
    let mut w = workload.clone();
    w.target = target;
    Estimator::new(&w)
        .unwrap()
        .peaks(&Plan::store_all())
        .unwrap()
        .reserved_bytes
}

#[test]
fn a_gpu_step_larger_than_the_free_memory_is_refused_naming_both_figures() {
    // toy-if at N=512: a plan lowers its reserved peak, so a fitting plan exists below it.
    let workload = Workload::zoo_small("toy-if", 512).unwrap();
    let store = Plan::store_all();
    let gpu = reserved_peak(&workload, Target::Cuda);
    let cpu = reserved_peak(&workload, Target::Cpu);

    let how = "-m toy-if --batch 512";
    refuse_unless_fits(&workload, &[&store], Device::Cuda(0), &room(gpu), how).unwrap();
    let e = refuse_unless_fits(&workload, &[&store], Device::Cuda(0), &room(gpu - 1), how)
        .unwrap_err()
        .to_string();
    for part in [
        format!("({gpu} bytes) at its peak"),
        "cuda:0 has only".to_string(),
        format!("({} bytes; injected by the test)", gpu - 1),
        format!(
            "memopt optimize -m toy-if --batch 512 --device cuda:0 --budget {}",
            gpu - 1
        ),
        "--ignore-memory-limit".to_string(),
    ] {
        assert!(e.contains(&part), "{part} missing from: {e}");
    }
    // The CPU compares the reserved peak of its own target, and suggests no --device.
    refuse_unless_fits(&workload, &[&store], Device::Cpu, &room(cpu), how).unwrap();
    let e = refuse_unless_fits(&workload, &[&store], Device::Cpu, &room(cpu - 1), how)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("({cpu} bytes) at its peak")), "{e}");
    assert!(e.contains("may use only"), "{e}");
    assert!(!e.contains("--device"), "{e}");
    // Meta holds no data: never refused.
    refuse_unless_fits(&workload, &[&store], Device::Meta(Target::Cuda), &room(0), how).unwrap();
}
