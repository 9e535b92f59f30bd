//! What a hostile user throws at memopt, one test per class of failure (issue 16): steps that
//! would not fit the memory limit are refused with both figures, inputs are bounded regular
//! files, outputs are atomic, byte counts never wrap, allocations never abort, counts are
//! positive and names from files cannot drive the terminal.

use clap::Parser;
use memopt_cli::{Cli, CliError};
use std::path::Path;

/// Runs a command line in process; returns its stdout or its error.
fn run(args: &[&str]) -> Result<String, CliError> {
    let cli = Cli::try_parse_from(std::iter::once("memopt").chain(args.iter().copied()))
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let mut out = Vec::new();
    memopt_cli::run(cli, &mut out)?;
    Ok(String::from_utf8(out).expect("utf-8 output"))
}

fn error(args: &[&str]) -> String {
    failure(run(args))
}

/// The message of a command that must fail.
fn failure(r: Result<String, CliError>) -> String {
    match r {
        Ok(out) => panic!("the command succeeded:\n{out}"),
        Err(e) => e.to_string(),
    }
}

/// `memopt profile --device meta` plus `args`.
fn meta_profile(args: &[&str]) -> Result<String, CliError> {
    let mut all = vec!["profile", "--device", "meta"];
    all.extend(args);
    run(&all)
}

/// A fresh directory for `test`, removed with everything in it when dropped (also when the test
/// fails).
fn dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("memopt-hardening-{test}-"))
        .tempdir()
        .expect("temp dir")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A model whose reserved peak a plan lowers (10 MiB of segments storing everything, 4 MiB
/// under the min-memory plan), small enough for real steps in a test.
const MODEL: [&str; 4] = ["-m", "toy-if", "--batch", "512"];

/// The exact reserved peak of a CPU step (the caching allocator's segments), from a Meta
/// profile.
fn exact_reserved(extra: &[&str]) -> u64 {
    let mut args = vec!["profile", "--device", "meta", "--json"];
    args.extend(MODEL);
    args.extend(extra);
    let v: serde_json::Value = serde_json::from_str(&run(&args).unwrap()).unwrap();
    v["allocator"]["reserved_peak_bytes"].as_u64().unwrap()
}

/// `memopt train` for one quiet step of [`MODEL`], plus `extra`.
fn train_model(extra: &[&str]) -> Result<String, CliError> {
    let mut args = vec!["train", "--steps", "1", "-q"];
    args.extend(MODEL);
    args.extend(extra);
    run(&args)
}

#[test]
fn steps_over_the_memory_limit_are_refused_before_they_run() {
    let peak = exact_reserved(&[]);
    let below = (peak - 1).to_string();
    let suggested = format!("memopt optimize -m toy-if --batch 512 --budget {below} --out plan.json");
    // One byte short of the reserved peak: refused, with both numbers and a command that fits.
    for cmd in [
        vec!["train", "--steps", "1", "-q"],
        vec!["profile", "--runs", "1"],
        vec!["optimize", "--strategy", "min-memory", "--verify", "--steps", "1"],
        vec!["bench", "--steps", "1"],
    ] {
        let mut args = cmd.clone();
        args.extend(MODEL);
        args.extend(["--memory-limit", &below]);
        let e = error(&args);
        assert!(
            e.contains(&format!(
                "reserves {} ({peak} bytes)",
                memopt_cli::format::bytes(peak)
            )) && e.contains(&format!("({below} bytes; --memory-limit {below})"))
                && e.contains(&suggested)
                && e.contains("--ignore-memory-limit"),
            "{cmd:?}: {e}"
        );
    }
    // The suggested command fits: its plan's reserved peak is within the limit, and a step
    // under it runs inside that limit.
    let scratch = dir("oom-plan");
    let d = scratch.path();
    let plan = d.join("plan.json");
    let mut optimize = vec!["optimize", "--budget", &below, "--json", "--out", s(&plan)];
    optimize.extend(MODEL);
    let v: serde_json::Value = serde_json::from_str(&run(&optimize).unwrap()).unwrap();
    let planned = v["planned_peaks"]["reserved_bytes"].as_u64().unwrap();
    assert!(planned < peak, "{planned} < {peak}");
    assert_eq!(exact_reserved(&["--plan", s(&plan)]), planned);
    train_model(&["--plan", s(&plan), "--memory-limit", &below]).unwrap();
    train_model(&["--plan", s(&plan), "--memory-limit", &planned.to_string()]).unwrap();
    // Below what any plan reserves (one small segment is 2 MiB): no command is suggested, only
    // a smaller batch.
    let e = failure(train_model(&["--memory-limit", "1MiB"]));
    assert!(
        e.contains("no plan fits") && e.contains("lower --batch") && !e.contains("memopt optimize"),
        "{e}"
    );
    // The exact reserved peak fits, to the byte; and the override runs anyway.
    train_model(&["--memory-limit", &peak.to_string()]).unwrap();
    train_model(&["--memory-limit", "1", "--ignore-memory-limit"]).unwrap();
    // Meta steps hold no data: never refused.
    train_model(&["--device", "meta", "--memory-limit", "1"]).unwrap();
    // A limit that is not a size is a usage error naming the flag.
    let e = error(&["train", "--memory-limit", "lots", "-m", "spiking-mlp"]);
    assert!(e.contains("--memory-limit") && e.contains("unknown unit"), "{e}");
}

#[test]
fn the_probe_reads_cgroup_files_and_meminfo() {
    let scratch = dir("probe");
    let d = scratch.path();
    let mount = d.join("cgroup");
    std::fs::create_dir_all(mount.join("user.slice/app")).unwrap();
    std::fs::write(mount.join("user.slice/memory.max"), "6442450944\n").unwrap();
    std::fs::write(mount.join("user.slice/memory.current"), "1073741824\n").unwrap();
    std::fs::write(mount.join("user.slice/app/memory.max"), "max\n").unwrap();
    std::fs::write(mount.join("user.slice/app/memory.current"), "5\n").unwrap();
    std::fs::create_dir_all(mount.join("memory")).unwrap();
    std::fs::write(mount.join("memory/memory.limit_in_bytes"), "1000000\n").unwrap();
    std::fs::write(mount.join("memory/memory.usage_in_bytes"), "400000\n").unwrap();
    let cg = d.join("cgroup-file");
    std::fs::write(&cg, "0::/user.slice/app\n7:memory:/\n").unwrap();
    let rooms = memopt_cli::memory_limit::cgroup_rooms(&cg, &mount);
    let bytes: Vec<u64> = rooms.iter().map(|r| r.bytes).collect();
    assert_eq!(bytes, [6442450944 - 1073741824, 600000], "{rooms:?}");
    let meminfo = d.join("meminfo");
    std::fs::write(&meminfo, "MemTotal: 100 kB\nMemAvailable:    2048 kB\n").unwrap();
    assert_eq!(
        memopt_cli::memory_limit::mem_available(&meminfo).unwrap().bytes,
        2048 * 1024
    );
}

#[test]
fn inputs_are_bounded_regular_utf8_files() {
    let scratch = dir("inputs");
    let d = scratch.path();
    // A device, a directory, an oversized file: errors naming the file, found before reading.
    let e = error(&["train", "-m", "spiking-mlp", "--plan", "/dev/zero"]);
    assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
    let e = failure(meta_profile(&["-m", s(d)]));
    assert!(e.contains("is a directory"), "{e}");
    let big = d.join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(memopt_cli::files::MAX_INPUT_BYTES + 1)
        .unwrap();
    let e = failure(meta_profile(&["-m", s(&big)]));
    assert!(e.contains("at most 16777216 bytes"), "{e}");
    let e = failure(meta_profile(&["-m", "spiking-mlp", "--plan", s(&big)]));
    assert!(e.contains("at most 16777216 bytes"), "{e}");
    let bin = d.join("bin.json");
    std::fs::write(&bin, b"{\"name\": \"\xff\"}").unwrap();
    assert!(failure(meta_profile(&["-m", s(&bin)])).contains("not UTF-8"));
    // A byte-order mark is accepted, on models and plans.
    let model = d.join("bom.json");
    let example = include_str!("../../../examples/models/small-snn.json");
    std::fs::write(&model, format!("\u{feff}{example}")).unwrap();
    meta_profile(&["-m", s(&model)]).unwrap();
    let plan = d.join("bom-plan.json");
    std::fs::write(&plan, "\u{feff}{\"version\": 1, \"entries\": []}").unwrap();
    meta_profile(&["-m", "spiking-mlp", "--plan", s(&plan)]).unwrap();
    // Duplicate keys and unknown fields, at the top and deep inside.
    for (text, why) in [
        (
            r#"{"version": 1, "version": 1, "entries": []}"#,
            "duplicate key \"version\"",
        ),
        (
            r#"{"version": 1, "entries": [], "note": 1}"#,
            "unknown field `note`",
        ),
        (
            r#"{"version": 1, "entries": [{"path": "0", "policy": {"kind": "checkpoint", "kind": "store"}}]}"#,
            "duplicate key \"kind\"",
        ),
        (
            r#"{"version": 1, "made_for": {"model": "spiking-mlp", "note": 1}, "entries": []}"#,
            "unknown field `note`",
        ),
        (
            r#"{"version": 1, "entries": [{"path": "0", "policy": {"kind": "store"}}, {"path": "0", "policy": {"kind": "store"}}]}"#,
            "appears more than once",
        ),
    ] {
        std::fs::write(&plan, text).unwrap();
        let e = failure(meta_profile(&["-m", "spiking-mlp", "--plan", s(&plan)]));
        assert!(e.contains(why), "{text}: {e}");
    }
    let dup = example.replacen("\"type\": \"lif\"", "\"type\": \"lif\", \"type\": \"if\"", 1);
    assert_ne!(dup, example);
    std::fs::write(&model, dup).unwrap();
    let e = failure(meta_profile(&["-m", s(&model)]));
    assert!(e.contains("duplicate key \"type\""), "{e}");
}

/// `memopt optimize` of the spiking MLP writing the plan to `out` and the chart to `svg`.
fn plan_and_chart(out: &Path, svg: &Path) -> Result<String, CliError> {
    run(&["optimize", "-m", "spiking-mlp", "--out", s(out), "--svg", s(svg)])
}

#[test]
fn outputs_are_written_only_when_the_whole_command_succeeds() {
    let scratch = dir("outputs");
    let d = scratch.path();
    let plan = d.join("plan.json");
    std::fs::write(&plan, "old plan").unwrap();
    // The chart cannot be written (no such directory): found before any work, plan untouched.
    let missing = d.join("no-such-dir/chart.svg");
    let e = failure(plan_and_chart(&plan, &missing));
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), "old plan");
    // The same file for two outputs is a usage error, however it is spelled, symbolic links
    // included.
    let same = d.join(".").join("plan.json");
    let e = failure(plan_and_chart(&plan, &same));
    assert!(e.contains("same file"), "{e}");
    let link = d.join("link.json");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&plan, &link).unwrap();
    let e = failure(plan_and_chart(&plan, &link));
    assert!(e.contains("same file"), "{e}");
    // Writing through a symbolic link replaces its target and keeps the link.
    run(&["optimize", "-m", "spiking-mlp", "--out", s(&link)]).unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&plan).unwrap().contains("\"version\""));
    std::fs::write(&plan, "old plan").unwrap();
    // A command that fails after planning (a bad plan to chart) leaves the old chart.
    let chart = d.join("chart.svg");
    std::fs::write(&chart, "old chart").unwrap();
    let bad = d.join("bad-plan.json");
    std::fs::write(
        &bad,
        r#"{"version": 1, "entries": [{"path": "nope", "policy": {"kind": "checkpoint"}}]}"#,
    )
    .unwrap();
    error(&["plot", "-m", "spiking-mlp", "--plan", s(&bad), "-o", s(&chart)]);
    assert_eq!(std::fs::read_to_string(&chart).unwrap(), "old chart");
    // Success replaces both files whole, leaving no temporary file behind.
    plan_and_chart(&plan, &chart).unwrap();
    assert!(std::fs::read_to_string(&plan).unwrap().contains("\"version\""));
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
    let names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn byte_counts_and_shapes_never_wrap() {
    // 150e9 published VGG-11 samples on Meta: the bytes held exceed u64, an error (not a peak).
    for cmd in ["profile", "optimize"] {
        let mut args = vec![
            cmd,
            "-m",
            "spiking-vgg11-bn",
            "--published",
            "--batch",
            "150000000000",
        ];
        if cmd == "profile" {
            args.extend(["--device", "meta"]);
        }
        let e = error(&args);
        assert!(
            !e.contains("internal error") && (e.contains("exceed") || e.contains("address space")),
            "{cmd}: {e}"
        );
    }
    // A flatten of a sample larger than the address space names the layer.
    let scratch = dir("shapes");
    let d = scratch.path();
    let model = d.join("huge.json");
    std::fs::write(
        &model,
        r#"{"name": "huge", "input": {"time_steps": 1, "sample": [8, 4294967296, 4294967296], "classes": 2},
            "layers": [{"type": "flatten"}, {"type": "linear", "out": 2}]}"#,
    )
    .unwrap();
    let e = failure(meta_profile(&["-m", s(&model)]));
    assert!(
        e.contains("layers[0] (flatten)") && e.contains("address space"),
        "{e}"
    );
}

#[test]
fn host_allocations_fail_cleanly_instead_of_aborting() {
    // 2.5 TB of synthetic batch: an out-of-memory error, not an abort.
    let e = error(&[
        "train",
        "-m",
        "spiking-mlp",
        "--batch",
        "10000000000",
        "--steps",
        "1",
        "-q",
        "--ignore-memory-limit",
    ]);
    assert!(e.contains("out of memory") || e.contains("address space"), "{e}");
    // A seed at the top of its range does not overflow the labels.
    run(&[
        "train",
        "-m",
        "spiking-mlp",
        "--steps",
        "1",
        "-q",
        "--seed",
        "18446744073709551615",
    ])
    .unwrap();
}

#[test]
fn counts_must_be_positive_and_budgets_representable() {
    for flag in ["--batch", "--timesteps", "--classes"] {
        let e = failure(meta_profile(&["-m", "spiking-mlp", flag, "-1"]));
        assert!(e.contains("positive whole number"), "{flag}: {e}");
    }
    let e = error(&["optimize", "-m", "spiking-mlp", "--budget", "1e30"]);
    assert!(e.contains("largest representable"), "{e}");
    let e = error(&["train", "-m", "spiking-mlp", "--memory-limit", "-1"]);
    assert!(e.contains("--memory-limit") && e.contains("positive"), "{e}");
    for lr in ["NaN", "inf", "-0.1", "1e400"] {
        let e = error(&["train", "-m", "spiking-mlp", "--lr", lr]);
        assert!(
            e.contains("learning rate must be a finite number >= 0"),
            "{lr}: {e}"
        );
    }
    let e = error(&["train", "-m", "spiking-mlp", "--lr", "0.1"]);
    assert!(e.contains("--lr works with training on a dataset"), "{e}");
    let out = run(&["optimize", "-m", "spiking-mlp", "--budget", "1TiB"]).unwrap();
    assert!(out.contains("budget"), "{out}");
}

#[test]
fn control_characters_in_names_are_escaped() {
    let scratch = dir("names");
    let d = scratch.path();
    let model = d.join("evil.json");
    std::fs::write(
        &model,
        r#"{"name": "evil\u001b[2J\r", "input": {"time_steps": 1, "sample": [4], "classes": 2},
            "layers": [{"type": "linear", "out": 2}]}"#,
    )
    .unwrap();
    let out = meta_profile(&["-m", s(&model)]).unwrap();
    assert!(
        !out.contains('\x1b') && !out.contains('\r') && out.contains("evil\\u{1b}[2J\\u{d}"),
        "{out}"
    );
    let chart = d.join("evil.svg");
    run(&["plot", "-m", s(&model), "--baseline-only", "-o", s(&chart)]).unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        !svg.contains('\x1b') && svg.contains("evil\\u{1b}[2J"),
        "escaped in the SVG"
    );
}

#[test]
fn planning_a_huge_batch_exits_cleanly() {
    // Planning steps on Meta, which holds no data: with a batch of 10^10 the convolutions'
    // stepwise weight gradient once listed the step's images all the same (80 GB on the host)
    // and the process aborted. Run as a process, so that an abort shows as a signal.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(["optimize", "--batch", "10000000000"])
        .output()
        .expect("the memopt binary runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{:?} (a signal has no code): {stderr}",
        o.status
    );
}
