//! `cargo xtask gpu-bundle [--out DIR] [--wheel FILE]...`: one folder that runs every GPU test and
//! the GPU benchmark on a machine with a GPU and no Rust toolchain.
//!
//! Builds the GPU test binaries, the `memopt` CLI and the `gpu_bench` and `synthetic_dataset`
//! examples in release mode with symbols stripped, copies them with `run.sh`, `data_e2e.sh`,
//! `README.md`, the PyTorch + SpikingJelly scripts and the DVS128 event fixture into the folder
//! (default `target/gpu-bundle/`), optionally with Python wheels (SpikingJelly and the
//! pure-Python packages it imports that a GPU machine's PyTorch lacks), and refuses a folder over
//! 48 MiB. The test binaries are found from
//! `cargo test --no-run --message-format=json`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Largest bundle, in bytes.
const MAX_BYTES: u64 = 48 * 1024 * 1024;

/// The GPU test targets: (package, integration test).
const TESTS: [(&str, &str); 11] = [
    ("memopt-core", "nvrtc_kernels"),
    ("memopt-core", "gpu_pool"),
    ("memopt-core", "gpu_ops"),
    ("memopt-core", "gpu_layers"),
    ("memopt-core", "gpu_unread_outputs"),
    ("memopt-profiler", "gpu_timing"),
    ("memopt-compress", "nvrtc"),
    ("memopt-compress", "gpu"),
    ("memopt-compress", "spike_counts"),
    ("memopt-search", "gpu_step"),
    ("memopt-data", "training"),
];

/// Files copied as they are: (source, name in the bundle).
const FILES: [(&str, &str); 7] = [
    ("xtask/gpu-bundle/run.sh", "run.sh"),
    ("xtask/gpu-bundle/README.md", "README.md"),
    ("xtask/gpu-bundle/spikingjelly_vgg.py", "spikingjelly_vgg.py"),
    ("xtask/gpu-bundle/data_e2e.sh", "data_e2e.sh"),
    ("xtask/gpu-bundle/spikingjelly_data.py", "spikingjelly_data.py"),
    (
        "crates/memopt-data/tests/fixtures/events/dvs128.aedat",
        "events/dvs128.aedat",
    ),
    (
        "crates/memopt-data/tests/fixtures/events/dvs128_labels.csv",
        "events/dvs128_labels.csv",
    ),
];

/// Executables of `bin/`: (package, cargo's target selection, target name).
const BINARIES: [(&str, &str, &str); 3] = [
    ("memopt-cli", "--example", "gpu_bench"),
    ("memopt-cli", "--bin", "memopt"),
    ("memopt-data", "--example", "synthetic_dataset"),
];

/// Release, stripped, without debug info: set through cargo's profile environment variables so
/// that Cargo.toml's release profile (used by benches) stays as it is.
fn release_cargo(root: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root)
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false");
    c
}

/// Runs `c` and returns the executables of the compiler artifacts it reports (JSON lines on
/// stdout) whose target name is `name`.
fn executables(mut c: Command, name: &str) -> Result<Vec<PathBuf>, String> {
    let shown = format!("{c:?}");
    eprintln!("xtask: {shown}");
    let out = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{shown} failed ({})", out.status));
    }
    let found: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .filter_map(|v| v["executable"].as_str().map(PathBuf::from))
        .collect();
    if found.is_empty() {
        return Err(format!("{shown} reported no executable for '{name}'"));
    }
    Ok(found)
}

fn copy(from: &Path, to: &Path) -> Result<u64, String> {
    std::fs::copy(from, to).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Builds the bundle into `out` (replaced only once everything is built) and returns its size
/// in bytes.
pub fn build(root: &Path, out: &Path, wheels: &[PathBuf]) -> Result<u64, String> {
    if let Some(w) = wheels
        .iter()
        .find(|w| !w.is_file() || w.extension().is_none_or(|e| e != "whl"))
    {
        return Err(format!(
            "--wheel {}: not a wheel file (a *.whl, e.g. spikingjelly-2.0.0-py3-none-any.whl)",
            w.display()
        ));
    }
    let staging = out.with_extension("partial");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| format!("cannot clear {}: {e}", staging.display()))?;
    }
    for dir in ["tests", "bin", "wheels", "events"] {
        std::fs::create_dir_all(staging.join(dir))
            .map_err(|e| format!("cannot create {}: {e}", staging.display()))?;
    }
    for (package, test) in TESTS {
        let mut c = release_cargo(root);
        c.args([
            "test",
            "--release",
            "--no-run",
            "--message-format=json",
            "-p",
            package,
            "--test",
            test,
        ]);
        for exe in executables(c, test)? {
            copy(&exe, &staging.join("tests").join(test))?;
        }
    }
    for (package, kind, name) in BINARIES {
        let mut c = release_cargo(root);
        c.args([
            "build",
            "--release",
            "--message-format=json",
            "-p",
            package,
            kind,
            name,
        ]);
        for exe in executables(c, name)? {
            copy(&exe, &staging.join("bin").join(name))?;
        }
    }
    for (from, name) in FILES {
        copy(&root.join(from), &staging.join(name))?;
    }
    for w in wheels {
        let name = w.file_name().ok_or("the wheel path has no file name")?;
        copy(w, &staging.join("wheels").join(name))?;
    }
    let size = dir_size(&staging)?;
    if size > MAX_BYTES {
        return Err(format!(
            "the bundle is {size} bytes ({:.1} MiB), over the 48 MiB limit; it is left in {}",
            size as f64 / 1048576.0,
            staging.display()
        ));
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("cannot replace {}: {e}", out.display()))?;
    }
    std::fs::rename(&staging, out)
        .map_err(|e| format!("cannot move the bundle to {}: {e}", out.display()))?;
    Ok(size)
}

/// Total bytes of the files under `dir`.
fn dir_size(dir: &Path) -> Result<u64, String> {
    let mut total = 0;
    for e in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let meta = e.metadata().map_err(|e| e.to_string())?;
        total += if meta.is_dir() {
            dir_size(&e.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
