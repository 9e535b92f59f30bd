//! `--device` is spelled and checked alike in every command that runs or plans a step: a bad
//! spelling is a usage error naming the valid ones, a GPU that is not there is an error naming
//! it (and what is valid here), and the planning commands accept `cuda[:N]` on any machine.

mod common;

use common::*;

#[test]
fn every_command_spells_and_checks_the_device_alike() {
    let svg = temp("device-flag.svg");
    let svg = svg.to_str().expect("utf-8 temp path");
    for args in [
        vec!["profile", "-m", "spiking-mlp"],
        vec!["train", "-m", "spiking-mlp", "--steps", "1"],
        vec!["optimize", "-m", "spiking-mlp"],
        vec!["bench", "-m", "spiking-mlp", "--steps", "1"],
        vec!["plot", "-m", "spiking-mlp", "-o", svg],
    ] {
        let mut bad = args.clone();
        bad.extend(["--device", "tpu:0"]);
        let e = fails(&bad, 2);
        assert!(e.contains("tpu:0") && e.contains("cuda:N"), "{args:?}: {e}");
    }
    // Commands that run steps need the GPU to exist.
    let no_gpu = !matches!(memopt_core::cuda_device_count(), Ok(n) if n > 7);
    if no_gpu {
        for args in [
            vec!["profile", "-m", "spiking-mlp", "--device", "cuda:7"],
            vec!["train", "-m", "spiking-mlp", "--steps", "1", "--device", "cuda:7"],
            vec!["optimize", "-m", "spiking-mlp", "--verify", "--device", "cuda:7"],
            vec!["bench", "-m", "spiking-mlp", "--steps", "1", "--device", "cuda:7"],
        ] {
            let e = fails(&args, 1);
            assert!(e.contains("--device cuda:7"), "{args:?}: {e}");
        }
    }
    // Planning and charting need no GPU.
    let text = ok(&[
        "plot",
        "-m",
        "spiking-mlp",
        "--baseline-only",
        "--device",
        "cuda",
        "-o",
        svg,
    ]);
    assert!(text.contains("wrote"), "{text}");
    let e = fails(
        &["bench", "-m", "spiking-mlp", "--steps", "1", "--device", "meta"],
        2,
    );
    assert!(e.contains("real steps"), "{e}");
}

#[test]
fn planning_for_a_gpu_offloads_and_reports_host_memory_unless_told_not_to() {
    let args = ["optimize", "--device", "meta:cuda", "--strategy", "min-memory"];
    let text = ok(&args);
    assert!(
        text.contains("offload(") && text.contains("host memory"),
        "{text}"
    );
    let mut without = args.to_vec();
    without.push("--no-offload");
    let text = ok(&without);
    assert!(
        !text.contains("offload(") && !text.contains("host memory"),
        "{text}"
    );
    // On the CPU nothing is offloaded.
    let text = ok(&["optimize", "--strategy", "min-memory"]);
    assert!(
        !text.contains("offload(") && !text.contains("host memory"),
        "{text}"
    );
    // `profile` of an offloading plan shows the same host memory on Meta of a GPU.
    let plan = temp("offloading-plan.json");
    let plan = plan.to_str().expect("utf-8 temp path");
    let planned = ok(&[
        "optimize",
        "--device",
        "meta:cuda",
        "--strategy",
        "min-memory",
        "-o",
        plan,
    ]);
    let host = |text: &str| {
        text.lines()
            .find(|l| l.contains("host memory"))
            .and_then(|l| l.split('(').nth(1))
            .and_then(|l| l.split(' ').next())
            .map(str::to_string)
    };
    let profiled = ok(&["profile", "--device", "meta:cuda", "--plan", plan]);
    assert!(host(&planned).is_some(), "{planned}");
    assert_eq!(host(&profiled), host(&planned), "{profiled}");
}
