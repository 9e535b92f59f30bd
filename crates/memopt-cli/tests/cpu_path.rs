//! The CPU kernels' vector path: `MEMOPT_CPU_ISA` caps it, a value this CPU cannot run is
//! refused before any work, and `train --json` reports the path used.

use memopt_core::CpuIsa;
use serde_json::Value;
use std::process::{Command, Output};

fn memopt_with_cap(cap: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(args)
        .env("MEMOPT_CPU_ISA", cap)
        .output()
        .expect("the memopt binary runs")
}

const TRAIN: &[&str] = &[
    "train", "-m", "toy-if", "-n", "2", "-t", "2", "--steps", "1", "--json", "--quiet",
];

#[test]
fn an_unknown_cap_is_refused_naming_the_valid_paths() {
    let o = memopt_with_cap("sse9", TRAIN);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("MEMOPT_CPU_ISA") && stderr.contains("'sse9'") && stderr.contains("portable"),
        "{stderr}"
    );
    assert!(o.stdout.is_empty(), "nothing ran");
}

#[test]
fn every_available_path_is_the_one_train_reports_and_gives_the_same_loss() {
    let mut losses = Vec::new();
    for isa in CpuIsa::ALL {
        if !isa.available() {
            eprintln!("skipped: the {isa} path (this CPU lacks its instructions)");
            continue;
        }
        let o = memopt_with_cap(isa.name(), TRAIN);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["cpu_path"], isa.name());
        losses.push((isa, v["losses"].clone()));
    }
    for (isa, l) in &losses[1..] {
        assert_eq!(
            l, &losses[0].1,
            "{isa} against {}: the same bits on every path",
            losses[0].0
        );
    }
}
