//! Project automation, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! - `cargo xtask bench [--quick] [--models a,b] [--no-kernels] [--no-models]`: the kernel
//!   benches (criterion: memopt-core, memopt-compress and the memopt-profiler estimator)
//!   summarised into `target/bench/kernels.{md,json}`, then the whole-model tables (every zoo model x strategy:
//!   exact and measured peak, step time ratio to the baseline, planning time) written by the
//!   memopt-cli `models` bench into `target/bench/models.{md,json}`. `--quick` passes criterion
//!   short warm-up and measurement times and times one step per table row.
//! - `cargo xtask gpu-bundle [--out DIR] [--wheel FILE]...`: the GPU test binaries and the GPU
//!   benchmark (release, stripped) with `run.sh` in one folder of at most 48 MiB (default
//!   `target/gpu-bundle/`) to copy to a GPU machine without Rust (see `gpu_bundle.rs`).
//! - `cargo xtask peer [--threads K] [--steps S] [--quick]`: one training step of memopt against
//!   PyTorch + SpikingJelly 2.0 (`bench/peer/step_time.py`) on the workloads of issue 12, same
//!   thread count, written to `target/bench/peer.{md,json}`; skips, saying what it needs, when
//!   no Python with torch and spikingjelly is found (`MEMOPT_PEER_PYTHON`, default `python3`).
//! - `cargo xtask ci`: runs `.ci/run` (format, clippy, NVRTC set-up, the workspace tests), so
//!   local runs and CI run the same thing.
//!
//! The task itself depends on no memopt crate: the benchmarks run in cargo's bench profile.

mod gpu_bundle;
mod peer;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  bench [--quick] [--models a,b] [--no-kernels] [--no-models]
        kernel benches (criterion) and whole-model tables, written under target/bench/
  gpu-bundle [--out DIR] [--wheel FILE]...
        GPU test binaries + GPU benchmark + run.sh in one folder (default target/gpu-bundle/,
        at most 48 MiB); each --wheel adds a Python wheel for the PyTorch comparison
        (spikingjelly, and loguru and SciencePlots, which it imports)
  peer [--threads K] [--steps S] [--quick]
        one training step against PyTorch + SpikingJelly (needs MEMOPT_PEER_PYTHON or python3
        with torch and spikingjelly==2.0.0; skips without), written under target/bench/
  ci    run .ci/run: cargo fmt --check, clippy -D warnings, NVRTC set-up, cargo test --workspace";

fn root() -> PathBuf {
    // xtask/ is one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(mut c: Command) -> Result<(), String> {
    let shown = format!("{c:?}");
    eprintln!("xtask: {shown}");
    let status = c.status().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// The workspace's target directory, as cargo resolves it (CARGO_TARGET_DIR, config, default).
fn target_dir() -> Result<PathBuf, String> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    v["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata gave no target_directory".into())
}

/// One criterion result: its id and median time per iteration.
struct KernelResult {
    id: String,
    median_ns: f64,
    throughput: Option<String>,
}

/// Reads every `new/benchmark.json` + `new/estimates.json` pair criterion left under `dir`.
fn collect_criterion(dir: &Path, out: &mut Vec<KernelResult>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if p.file_name().is_some_and(|n| n == "new") {
            let read = |f: &str| -> Option<Value> {
                serde_json::from_str(&std::fs::read_to_string(p.join(f)).ok()?).ok()
            };
            if let (Some(b), Some(est)) = (read("benchmark.json"), read("estimates.json"))
                && let Some(median) = est["median"]["point_estimate"].as_f64()
            {
                let throughput = b["throughput"].as_object().and_then(|t| {
                    let (kind, n) = t.iter().next()?;
                    let n = n.as_f64()?;
                    let per_s = n / (median * 1e-9);
                    Some(match kind.as_str() {
                        "Bytes" | "BytesDecimal" => format!("{:.2} GB/s", per_s / 1e9),
                        // The GEMM and conv benches count floating-point operations as elements.
                        "Elements" => format!("{:.3} G elements/s", per_s / 1e9),
                        _ => format!("{:.3} G {}/s", per_s / 1e9, kind.to_lowercase()),
                    })
                });
                out.push(KernelResult {
                    id: b["full_id"].as_str().unwrap_or("?").to_string(),
                    median_ns: median,
                    throughput,
                });
            }
        } else {
            collect_criterion(&p, out);
        }
    }
}

/// Writes result files together, called once a task has succeeded: each goes to a temporary
/// file in its directory first, and only when every one is written are they renamed over the
/// old files, so a failed or interrupted task leaves the previous results intact.
fn write_results(files: &[(PathBuf, String)]) -> Result<(), String> {
    let tmp_of = |path: &Path| {
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(format!(".xtask-{}.tmp", std::process::id()));
        path.with_file_name(name)
    };
    let mut staged: Vec<(PathBuf, &Path)> = Vec::new();
    let mut staging = || -> Result<(), String> {
        for (path, text) in files {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let tmp = tmp_of(path);
            staged.push((tmp.clone(), path));
            std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        }
        Ok(())
    };
    let result = staging().and_then(|()| {
        for (tmp, path) in &staged {
            std::fs::rename(tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("xtask: wrote {}", path.display());
        }
        Ok(())
    });
    if result.is_err() {
        for (tmp, _) in &staged {
            let _ = std::fs::remove_file(tmp);
        }
    }
    result
}

fn kernel_summary(target: &Path, out_dir: &Path) -> Result<(), String> {
    let mut results = Vec::new();
    collect_criterion(&target.join("criterion"), &mut results);
    results.sort_by(|a, b| a.id.cmp(&b.id));
    let mut md = String::from(
        "# memopt kernel benches (criterion, median per iteration)\n\nThroughput in elements/s is FLOP/s for the GEMM and conv2d benches (they count floating-point \
         operations as elements) and values/s elsewhere; the ratios to GEMM and memcpy are printed by the \
         conv_ratio and neuron benches.\n\n| benchmark | median | throughput |\n|---|---|---|\n",
    );
    let mut json = Vec::new();
    for r in &results {
        let t = if r.median_ns >= 1e6 {
            format!("{:.3} ms", r.median_ns / 1e6)
        } else {
            format!("{:.2} us", r.median_ns / 1e3)
        };
        md.push_str(&format!(
            "| {} | {t} | {} |\n",
            r.id,
            r.throughput.as_deref().unwrap_or("")
        ));
        json.push(serde_json::json!({"id": r.id, "median_ns": r.median_ns, "throughput": r.throughput}));
    }
    write_results(&[
        (out_dir.join("kernels.md"), md),
        (
            out_dir.join("kernels.json"),
            serde_json::to_string_pretty(&json).unwrap_or_default(),
        ),
    ])
}

fn bench(args: &[String]) -> Result<(), String> {
    let known = ["--quick", "--no-kernels", "--no-models", "--models"];
    let mut i = 0;
    while i < args.len() {
        if !known.contains(&args[i].as_str()) {
            return Err(format!("unknown option '{}' for bench\n\n{USAGE}", args[i]));
        }
        i += if args[i] == "--models" { 2 } else { 1 };
    }
    let quick = args.iter().any(|a| a == "--quick");
    let models = args
        .iter()
        .position(|a| a == "--models")
        .map(|i| {
            args.get(i + 1)
                .cloned()
                .ok_or("--models needs a comma-separated list")
        })
        .transpose()?;
    let target = target_dir()?;
    let out_dir = target.join("bench");
    if !args.iter().any(|a| a == "--no-kernels") {
        let mut c = cargo();
        c.args([
            "bench",
            "-p",
            "memopt-core",
            "-p",
            "memopt-compress",
            "-p",
            "memopt-profiler",
            "--bench",
            "*",
            "--",
        ]);
        if quick {
            c.args(["--warm-up-time", "1", "--measurement-time", "2"]);
        }
        run(c)?;
        kernel_summary(&target, &out_dir)?;
    }
    if !args.iter().any(|a| a == "--no-models") {
        let mut c = cargo();
        c.args(["bench", "-p", "memopt-cli", "--bench", "models", "--", "--out"]);
        c.arg(&out_dir);
        if quick {
            c.arg("--quick");
        }
        if let Some(m) = models {
            c.args(["--models", &m]);
        }
        run(c)?;
    }
    eprintln!("xtask: results in {}", out_dir.display());
    Ok(())
}

fn gpu_bundle(args: &[String]) -> Result<(), String> {
    let mut out = None;
    let mut wheels = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .map(PathBuf::from)
                .ok_or_else(|| format!("{} needs a path\n\n{USAGE}", args[i]))
        };
        match args[i].as_str() {
            "--out" => out = Some(value()?),
            "--wheel" => wheels.push(value()?),
            other => return Err(format!("unknown option '{other}' for gpu-bundle\n\n{USAGE}")),
        }
        i += 2;
    }
    let out = match out {
        Some(o) => o,
        None => target_dir()?.join("gpu-bundle"),
    };
    let size = gpu_bundle::build(&root(), &out, &wheels)?;
    eprintln!(
        "xtask: GPU bundle in {} ({size} bytes, {:.1} MiB); on the GPU machine: {}/run.sh [OUT_DIR]",
        out.display(),
        size as f64 / 1048576.0,
        out.display()
    );
    Ok(())
}

fn ci() -> Result<(), String> {
    let mut c = Command::new("bash");
    c.arg(".ci/run").current_dir(root());
    run(c)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench(&args[1..]),
        Some("gpu-bundle") => gpu_bundle(&args[1..]),
        Some("peer") => peer::peer(&args[1..]),
        Some("ci") => ci(),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown task '{other}'\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write_results;

    /// Results are written together or not at all: when one cannot be written, the old
    /// contents of the others stay and no temporary file is left.
    #[test]
    fn results_are_replaced_only_when_all_are_written() {
        let dir = std::env::temp_dir().join(format!("xtask-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (md, json) = (dir.join("r.md"), dir.join("r.json"));
        write_results(&[(md.clone(), "old md".into()), (json.clone(), "old json".into())]).unwrap();
        // A file where a directory must be: the second result cannot be written.
        let blocker = dir.join("blocker");
        std::fs::write(&blocker, "").unwrap();
        let err = write_results(&[
            (md.clone(), "new md".into()),
            (blocker.join("r.json"), "new json".into()),
        ])
        .unwrap_err();
        assert!(err.contains("cannot"), "{err}");
        assert_eq!(std::fs::read_to_string(&md).unwrap(), "old md");
        assert_eq!(std::fs::read_to_string(&json).unwrap(), "old json");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
