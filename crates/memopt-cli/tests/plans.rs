//! `memopt optimize` end to end: plans for every strategy and target, plans written and read
//! back, verification, and what a plan file says it was made for.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn optimize_with_no_arguments_plans_the_vgg() {
    let text = ok(&["optimize"]);
    for needle in [
        "cifar10dvs-vgg: T=4 N=4 input [2, 48, 48]",
        "strategy: max-overhead",
        "baseline peak",
        "planned peak",
        "predicted overhead",
        "VGGBlock",
        "checkpoint(bit_spike",
    ] {
        assert!(text.contains(needle), "optimize lacks '{needle}':\n{text}");
    }
}

#[test]
fn optimize_json_has_the_stable_fields_for_every_strategy() {
    // The small SNN reserves one 2 MiB segment whatever the plan: its budget case bounds the
    // allocated peak; the reserved budget is the one segment.
    let cases: [(&[&str], &str); 9] = [
        (&[], "max-overhead"),
        (&["--strategy", "pipeline", "--level", "2"], "pipeline"),
        (&["--profile", "exhaustive", "--prefer", "memory"], "pipeline"),
        (&["--strategy", "memonger"], "memonger"),
        (&["--budget", "90%", "--budget-kind", "allocated"], "budget"),
        (&["--budget", "90%", "--budget-kind", "requested"], "budget"),
        (&["--budget", "2MiB"], "budget"),
        (
            &["--strategy", "max-overhead", "--max-overhead", "5%"],
            "max-overhead",
        ),
        (&["--strategy", "min-memory"], "min-memory"),
    ];
    let mut min_peak = u64::MAX;
    let mut peaks = Vec::new();
    for (extra, strategy) in cases {
        let mut args = vec!["optimize", "-m", EXAMPLE, "--json"];
        args.extend_from_slice(extra);
        let v = json(&args);
        assert_eq!(v["strategy"], strategy, "{args:?}");
        assert_eq!(v["model"], "small-snn");
        assert_eq!(u(&v, "batch"), 4);
        assert_eq!(u(&v, "timesteps"), 4);
        let (base, planned) = (u(&v, "baseline_peak_bytes"), u(&v, "planned_peak_bytes"));
        assert!(planned <= base, "{args:?}: {planned} > {base}");
        assert!(f(&v, "predicted_overhead") >= 0.0 && f(&v, "planning_ms") >= 0.0);
        assert_eq!(u(&v["plan"], "version"), 1);
        assert!(v["plan"]["entries"].is_array());
        assert!(
            v.get("grads_identical").is_none(),
            "verify fields only with --verify"
        );
        let level = |which: &str, level: &str| u(&v[which], level);
        assert!(level("planned_peaks", "requested_bytes") == planned);
        assert!(level("planned_peaks", "allocated_bytes") >= planned);
        assert!(level("planned_peaks", "reserved_bytes") >= level("planned_peaks", "allocated_bytes"));
        if strategy == "budget" {
            let (kind, bytes) = (v["budget"]["kind"].as_str().unwrap(), u(&v["budget"], "bytes"));
            let key = format!("{kind}_bytes");
            assert!(level("planned_peaks", &key) <= bytes, "{args:?}");
            if kind == "allocated" || kind == "requested" {
                assert!(bytes <= level("baseline_peaks", &key) * 9 / 10 + 1);
            } else {
                assert_eq!((kind, bytes), ("reserved", 2 << 20));
            }
        } else {
            assert!(v.get("budget").is_none(), "{args:?}");
        }
        if strategy == "min-memory" {
            min_peak = planned;
        }
        peaks.push(planned);
    }
    assert!(
        peaks.iter().all(|p| *p >= min_peak),
        "min-memory is the least: {peaks:?}"
    );
}

/// `--device cuda` plans for the GPU target on any machine (no GPU needed) and says so; the
/// CPU target's figures are those of a plan without the flag. The GPU target adds each GEMM op's
/// cuBLAS workspace, so its baseline peak is higher.
#[test]
fn optimize_plans_for_a_gpu_without_one() {
    let cpu = json(&["optimize", "-m", EXAMPLE, "--json"]);
    let cpu_flag = json(&["optimize", "-m", EXAMPLE, "--json", "--device", "cpu"]);
    assert!(cpu.get("target").is_none(), "no target field for the CPU");
    for field in ["baseline_peak_bytes", "planned_peak_bytes"] {
        assert_eq!(u(&cpu, field), u(&cpu_flag, field), "{field}");
    }
    let gpu = json(&["optimize", "-m", EXAMPLE, "--json", "--device", "cuda"]);
    assert_eq!(gpu["target"], "cuda");
    assert!(u(&gpu, "baseline_peak_bytes") > u(&cpu, "baseline_peak_bytes"));
    assert!(u(&gpu, "planned_peak_bytes") <= u(&gpu, "baseline_peak_bytes"));
    let text = ok(&["optimize", "-m", EXAMPLE, "--device", "cuda"]);
    assert!(
        text.contains("target: cuda") && text.contains("no GPU needed"),
        "{text}"
    );
    assert!(!ok(&["optimize", "-m", EXAMPLE]).contains("target:"));
}

#[test]
fn optimize_writes_a_plan_that_train_reads_back_at_the_planned_peak() {
    let plan = temp("plan.json");
    let v = json(&[
        "optimize",
        "-m",
        EXAMPLE,
        "--strategy",
        "min-memory",
        "--out",
        s(&plan),
        "--json",
    ]);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).expect("plan written")).expect("plan JSON");
    // The file is the plan of --json plus what it was made for.
    assert_eq!(written["version"], v["plan"]["version"]);
    assert_eq!(written["entries"], v["plan"]["entries"]);
    assert_eq!(written["made_for"]["model"], "small-snn");
    // Plans update in backward unless told otherwise; training honours it (the peak below).
    assert_eq!(written["update_in_backward"], Value::Bool(true));
    assert_eq!(v["plan"]["update_in_backward"], Value::Bool(true));
    assert!(!written["entries"].as_array().expect("entries").is_empty());
    let t = json(&[
        "train",
        "-m",
        EXAMPLE,
        "--plan",
        s(&plan),
        "--steps",
        "3",
        "--json",
    ]);
    assert_eq!(
        u(&t, "plan_entries"),
        written["entries"].as_array().map_or(0, Vec::len) as u64
    );
    assert_eq!(
        u(&t, "peak_bytes"),
        u(&v, "planned_peak_bytes"),
        "training measures the planned peak"
    );
    assert_eq!(t["losses"].as_array().expect("losses").len(), 3);
    // The text report and the tree.
    let text = ok(&[
        "optimize",
        "-m",
        EXAMPLE,
        "--strategy",
        "min-memory",
        "--out",
        s(&plan),
    ]);
    assert!(
        text.contains("Residual") && text.contains("wrote the plan to"),
        "{text}"
    );
}

#[test]
fn no_update_in_backward_plans_the_update_after_backward() {
    let args = ["optimize", "-m", "cifar10dvs-vgg", "--strategy", "min-memory"];
    let text = ok(&args);
    assert!(text.contains("optimizer update     in backward"), "{text}");
    let in_backward = json(&[&args[..], &["--json"]].concat());
    let after_args = [&args[..], &["--no-update-in-backward"]].concat();
    let text = ok(&after_args);
    assert!(text.contains("optimizer update           after"), "{text}");
    let plan = temp("after-backward.json");
    let after = json(&[&after_args[..], &["--json", "-o", s(&plan)]].concat());
    let written = std::fs::read_to_string(&plan).expect("plan written");
    assert!(!written.contains("update_in_backward"), "{written}");
    assert!(after["plan"]["update_in_backward"].is_null(), "absent when off");
    // Holding every gradient until the update costs memory: the least peak is higher.
    assert!(
        u(&after, "planned_peak_bytes") > u(&in_backward, "planned_peak_bytes"),
        "{} vs {}",
        u(&after, "planned_peak_bytes"),
        u(&in_backward, "planned_peak_bytes")
    );
    assert_eq!(
        u(&after, "baseline_peak_bytes"),
        u(&in_backward, "baseline_peak_bytes"),
        "the baseline updates after backward either way"
    );
    // `bench` plans the same way, and measures each plan's peak as planned.
    let least = |extra: &[&str]| -> u64 {
        let v = json(&[&["bench", "-m", "toy-if", "--steps", "1", "--json"], extra].concat());
        let rows = v["rows"].as_array().expect("rows");
        let row = rows
            .iter()
            .find(|r| r["strategy"] == "min-memory")
            .expect("a min-memory row");
        assert_eq!(row["peak_bytes"], row["measured_peak_bytes"], "{row}");
        row["peak_bytes"].as_u64().expect("bytes")
    };
    assert!(least(&["--no-update-in-backward"]) > least(&[]));
}

#[test]
fn optimize_verify_measures_the_peak_and_bit_identical_gradients() {
    let v = json(&[
        "optimize",
        "-m",
        EXAMPLE,
        "--strategy",
        "min-memory",
        "--verify",
        "--steps",
        "1",
        "--json",
    ]);
    assert_eq!(v["grads_identical"], Value::Bool(true));
    assert_eq!(u(&v, "measured_peak_bytes"), u(&v, "planned_peak_bytes"));
    assert_eq!(
        u(&v, "baseline_measured_peak_bytes"),
        u(&v, "baseline_peak_bytes")
    );
    assert!(f(&v, "baseline_step_ms") > 0.0 && f(&v, "planned_step_ms") > 0.0);
    let text = ok(&[
        "optimize",
        "-m",
        "toy-if",
        "--strategy",
        "memonger",
        "--verify",
        "--steps",
        "1",
    ]);
    assert!(
        text.contains("bit-identical to the baseline") && text.contains("to the byte"),
        "{text}"
    );
}

#[test]
fn verify_measures_every_allocator_peak_with_either_kind_of_segment() {
    let mut reserved = Vec::new();
    for expandable in ["true", "false"] {
        let v = json(&[
            "optimize",
            "-m",
            "cifar10dvs-vgg",
            "-n",
            "1",
            "-t",
            "2",
            "--verify",
            "--steps",
            "1",
            "--json",
            "--expandable-segments",
            expandable,
        ]);
        assert_eq!(
            v["allocator"]["expandable_segments"],
            Value::Bool(expandable == "true")
        );
        assert_eq!(v["measured_peaks"], v["planned_peaks"], "{expandable}: {v}");
        reserved.push(u(&v["planned_peaks"], "reserved_bytes"));
    }
    // The model's blocks reach the large pool: fixed segments reserve more for the same step.
    assert!(reserved[0] < reserved[1], "{reserved:?}");
    // The environment variable selects the same, in PyTorch's syntax; a bad value is one line.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(["optimize", "-m", "toy-if"])
        .env("MEMOPT_ALLOC_CONF", "expandable_segments:maybe")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("MEMOPT_ALLOC_CONF") && err.contains("True or False"),
        "{err}"
    );
}

#[test]
fn plan_files_say_what_they_were_made_for_and_warn_elsewhere() {
    let plan = temp("made-for.json");
    ok(&[
        "optimize",
        "-m",
        "toy-if",
        "--strategy",
        "min-memory",
        "--out",
        s(&plan),
    ]);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).expect("plan written")).expect("JSON");
    assert_eq!(written["made_for"]["model"], "toy-if", "{written}");
    assert_eq!(written["made_for"]["batch"], 4, "{written}");
    assert_eq!(written["made_for"]["memopt_version"], env!("CARGO_PKG_VERSION"));
    // The same workload: no warning.
    let same = memopt(&["profile", "-m", "toy-if", "--plan", s(&plan)]);
    assert!(same.status.success());
    assert!(!String::from_utf8_lossy(&same.stderr).contains("warning"));
    // Another batch size: the plan still applies, with a warning naming both workloads.
    let other = memopt(&["profile", "-m", "toy-if", "--batch", "2", "--plan", s(&plan)]);
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(other.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("N=4") && stderr.contains("N=2"),
        "{stderr}"
    );
    // A plan without `made_for` (older files) loads without a warning.
    let old = temp("old-plan.json");
    let entries = serde_json::to_string(&written["entries"]).expect("entries");
    std::fs::write(&old, format!("{{\"version\": 1, \"entries\": {entries}}}")).expect("write");
    let o = memopt(&["profile", "-m", "toy-if", "--batch", "2", "--plan", s(&old)]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
