//! `cargo xtask peer`: one training step of memopt against PyTorch + SpikingJelly 2.0, side by
//! side in one run with the same thread count. A benchmark, not a test: without a Python that
//! can import torch and spikingjelly it says what it needs and skips (exit 0).

use super::{cargo, root, run, target_dir, write_results};
use serde_json::{Value, json};
use std::process::Command;

/// The workloads of issue 12: (script name, memopt zoo name, extra memopt args, N, T).
const WORKLOADS: [(&str, &str, &[&str], usize, usize); 4] = [
    ("vgg", "cifar10dvs-vgg", &[], 2, 4),
    ("vgg", "cifar10dvs-vgg", &[], 8, 10),
    (
        "sew-resnet18",
        "sew-resnet18",
        &["--input", "3x32x32", "--classes", "10"],
        8,
        4,
    ),
    ("toy-if", "toy-if", &["--input", "512", "--classes", "10"], 32, 16),
];

const NEEDS: &str = "a Python with torch and spikingjelly==2.0.0 (pip install torch spikingjelly==2.0.0); \
                     set MEMOPT_PEER_PYTHON to its interpreter (default: python3)";

fn python() -> String {
    std::env::var("MEMOPT_PEER_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn peer_available(py: &str) -> Result<(), String> {
    let out = Command::new(py)
        .args(["-c", "import torch, spikingjelly.activation_based"])
        .output()
        .map_err(|e| format!("cannot run {py}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string())
    }
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs the comparison: `peer [--threads K] [--steps S] [--quick]`.
pub fn peer(args: &[String]) -> Result<(), String> {
    let mut threads = 2usize;
    let mut steps = 5usize;
    let mut quick = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v > 0)
                .ok_or_else(|| format!("{name} needs a positive integer"))
        };
        match a.as_str() {
            "--threads" => threads = number("--threads")?,
            "--steps" => steps = number("--steps")?,
            "--quick" => quick = true,
            other => {
                return Err(format!(
                    "unknown peer option '{other}' (valid: --threads K, --steps S, --quick)"
                ));
            }
        }
    }
    let py = python();
    if let Err(why) = peer_available(&py) {
        println!("xtask peer: skipped: it needs {NEEDS}; {py}: {why}");
        return Ok(());
    }
    let workloads: Vec<_> = if quick {
        WORKLOADS[..1].to_vec()
    } else {
        WORKLOADS.to_vec()
    };
    let mut build = cargo();
    build.args(["build", "--release", "-p", "memopt-cli"]);
    run(build)?;
    let target = target_dir()?;
    let memopt = target.join("release").join("memopt");
    let mut rows = Vec::new();
    for (script, zoo, extra, n, t) in workloads {
        let mut ours = Command::new(&memopt);
        ours.args(["train", "-m", zoo, "-n", &n.to_string(), "-t", &t.to_string()])
            .args(extra)
            .args(["--steps", &(steps + 1).to_string(), "--json", "--quiet"])
            .env("RAYON_NUM_THREADS", threads.to_string());
        let out = ours
            .output()
            .map_err(|e| format!("cannot run {}: {e}", memopt.display()))?;
        if !out.status.success() {
            return Err(format!(
                "memopt train failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let ours: Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("memopt train --json: {e}"))?;
        let workload = format!("{script}:{n}:{t}");
        let out = Command::new(&py)
            .current_dir(root())
            .args(["bench/peer/step_time.py", "--threads", &threads.to_string()])
            .args(["--steps", &steps.to_string(), &workload])
            .env("OMP_NUM_THREADS", threads.to_string())
            .output()
            .map_err(|e| format!("cannot run {py}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "bench/peer/step_time.py failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let theirs = json_lines(&out.stdout)
            .pop()
            .ok_or("bench/peer/step_time.py printed no result")?;
        let (a, b) = (
            ours["median_step_ms"].as_f64().unwrap_or(f64::NAN),
            theirs["median_step_ms"].as_f64().unwrap_or(f64::NAN),
        );
        let row = json!({
            "model": zoo, "batch": n, "timesteps": t, "threads": threads, "steps": steps,
            "memopt_ms": a, "pytorch_spikingjelly_ms": b, "ratio": a / b,
            "torch": theirs["torch"],
        });
        println!(
            "{zoo:<16} N={n:<3} T={t:<3} memopt {a:>10.1} ms   PyTorch+SpikingJelly {b:>10.1} ms   ratio {:.2}",
            a / b
        );
        rows.push(row);
    }
    let dir = target.join("bench");
    let mut md = String::from(
        "| model | N | T | memopt (ms) | PyTorch + SpikingJelly (ms) | memopt / peer |\n|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} |\n",
            r["model"].as_str().unwrap_or(""),
            r["batch"],
            r["timesteps"],
            r["memopt_ms"].as_f64().unwrap_or(f64::NAN),
            r["pytorch_spikingjelly_ms"].as_f64().unwrap_or(f64::NAN),
            r["ratio"].as_f64().unwrap_or(f64::NAN)
        ));
    }
    md.push_str(&format!(
        "\nMedian of {steps} steps after one warm-up step, {threads} threads on both sides (RAYON_NUM_THREADS, torch.set_num_threads).\n"
    ));
    write_results(&[
        (dir.join("peer.md"), md),
        (
            dir.join("peer.json"),
            serde_json::to_string_pretty(&Value::Array(rows)).unwrap_or_default(),
        ),
    ])?;
    eprintln!("xtask: results in {}", dir.join("peer.md").display());
    Ok(())
}
