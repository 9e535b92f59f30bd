//! `cargo xtask peer`: one training step of memopt against PyTorch + SpikingJelly 2.0, side by
//! side in one run with the same thread count. A benchmark, not a test: without a Python that
//! can import torch and spikingjelly it says what it needs and skips (exit 0).
//!
//! The two sides are interleaved so that a machine shared with other work slows both alike:
//! every round runs each workload once on each side (memopt first in even rounds, PyTorch first
//! in odd ones), each run a warm-up step and `--steps` timed steps in a fresh process. A run's
//! figure is the median of its timed steps; a workload's figures are the medians over rounds of
//! each side and of the per-round ratio memopt / PyTorch. The load average is recorded before
//! and after, and so are the CPU (model name, family, model) and the vector path each side's
//! CPU kernels used (memopt's `cpu_path`, PyTorch's `get_cpu_capability`), so that a ratio is
//! never compared across instruction sets by mistake.

use super::{cargo, root, run, target_dir, write_results};
use serde_json::{Value, json};
use std::process::Command;

/// One workload of issue 12.
#[derive(Clone, Copy)]
struct Workload {
    /// Model name in `bench/peer/step_time.py`.
    script: &'static str,
    /// memopt zoo name.
    zoo: &'static str,
    /// Extra `memopt train` arguments.
    extra: &'static [&'static str],
    n: usize,
    t: usize,
}

impl Workload {
    /// `script:N:T`, the name `step_time.py` takes.
    fn key(&self) -> String {
        format!("{}:{}:{}", self.script, self.n, self.t)
    }
}

const WORKLOADS: [Workload; 6] = [
    Workload {
        script: "vgg",
        zoo: "cifar10dvs-vgg",
        extra: &[],
        n: 2,
        t: 4,
    },
    Workload {
        script: "vgg",
        zoo: "cifar10dvs-vgg",
        extra: &[],
        n: 8,
        t: 10,
    },
    Workload {
        script: "sew-resnet18",
        zoo: "sew-resnet18",
        extra: &["--input", "3x32x32", "--classes", "10"],
        n: 8,
        t: 4,
    },
    Workload {
        script: "toy-if",
        zoo: "toy-if",
        extra: &["--input", "512", "--classes", "10"],
        n: 32,
        t: 16,
    },
    Workload {
        script: "spikformer",
        zoo: "spikformer-cifar10",
        extra: &[],
        n: 4,
        t: 4,
    },
    Workload {
        script: "spike-driven",
        zoo: "spike-driven-transformer",
        extra: &[],
        n: 4,
        t: 4,
    },
];

const NEEDS: &str = "a Python with torch and spikingjelly==2.0.0 (pip install torch spikingjelly==2.0.0); \
                     set MEMOPT_PEER_PYTHON to its interpreter (default: python3)";

const USAGE: &str = "valid: --threads K, --steps S, --rounds R, --only NAME:N:T (repeatable), --quick";

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

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`; `None` elsewhere).
fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The timed step times of a JSON list, the warm-up step (the first) left out when `warm_up`.
fn step_times(list: &Value, warm_up: bool) -> Result<Vec<f64>, String> {
    let all: Vec<f64> = list
        .as_array()
        .ok_or("no list of step times")?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    Ok(all.into_iter().skip(usize::from(warm_up)).collect())
}

/// Settings of a comparison.
struct Settings {
    threads: usize,
    steps: usize,
    memopt: std::path::PathBuf,
    python: String,
}

/// The processor's model name, family and model number (`/proc/cpuinfo`; "unknown" elsewhere).
fn cpu_model() -> String {
    let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown".into();
    };
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    format!(
        "{} (family {}, model {})",
        field("model name"),
        field("cpu family"),
        field("model")
    )
}

/// One run's median step time (ms) and the vector path its CPU kernels used.
struct Run {
    ms: f64,
    path: Value,
}

/// Median step time (ms) of one memopt run: a warm-up step and `steps` timed ones.
fn memopt_run(s: &Settings, w: &Workload) -> Result<Run, String> {
    let mut ours = Command::new(&s.memopt);
    ours.args([
        "train",
        "-m",
        w.zoo,
        "-n",
        &w.n.to_string(),
        "-t",
        &w.t.to_string(),
    ])
    .args(w.extra)
    .args(["--steps", &(s.steps + 1).to_string(), "--json", "--quiet"])
    .env("RAYON_NUM_THREADS", s.threads.to_string());
    let out = ours
        .output()
        .map_err(|e| format!("cannot run {}: {e}", s.memopt.display()))?;
    if !out.status.success() {
        return Err(format!(
            "memopt train failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("memopt train --json: {e}"))?;
    if v["sample_every"].as_u64() != Some(1) {
        return Err("memopt train sampled its step times; ask for fewer steps".into());
    }
    Ok(Run {
        ms: median(&step_times(&v["step_ms"], true)?),
        path: v["cpu_path"].clone(),
    })
}

/// Median step time (ms) of one PyTorch + SpikingJelly run, the torch version and the vector
/// path of its CPU kernels.
fn peer_run(s: &Settings, w: &Workload) -> Result<(f64, Value, Value), String> {
    let out = Command::new(&s.python)
        .current_dir(root())
        .args(["bench/peer/step_time.py", "--threads", &s.threads.to_string()])
        .args(["--steps", &s.steps.to_string(), &w.key()])
        .env("OMP_NUM_THREADS", s.threads.to_string())
        .env("MKL_NUM_THREADS", s.threads.to_string())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", s.python))?;
    if !out.status.success() {
        return Err(format!(
            "bench/peer/step_time.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or("bench/peer/step_time.py printed no result")?;
    Ok((
        median(&step_times(&v["step_ms"], false)?),
        v["torch"].clone(),
        v["cpu_capability"].clone(),
    ))
}

/// Runs the comparison: `peer [--threads K] [--steps S] [--rounds R] [--only NAME:N:T] [--quick]`.
pub fn peer(args: &[String]) -> Result<(), String> {
    let (mut threads, mut steps, mut rounds) = (2usize, 3usize, 3usize);
    let mut quick = false;
    let mut only: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value ({USAGE})"))
        };
        let positive = |name: &str, v: String| {
            v.parse()
                .ok()
                .filter(|&v: &usize| v > 0)
                .ok_or_else(|| format!("{name} needs a positive integer, got '{v}'"))
        };
        match a.as_str() {
            "--threads" => threads = positive("--threads", value("--threads")?)?,
            "--steps" => steps = positive("--steps", value("--steps")?)?,
            "--rounds" => rounds = positive("--rounds", value("--rounds")?)?,
            "--only" => only.push(value("--only")?),
            "--quick" => quick = true,
            other => return Err(format!("unknown peer option '{other}' ({USAGE})")),
        }
    }
    let known: Vec<String> = WORKLOADS.iter().map(Workload::key).collect();
    if let Some(bad) = only.iter().find(|o| !known.contains(o)) {
        return Err(format!(
            "--only {bad}: not a workload (valid: {})",
            known.join(", ")
        ));
    }
    let py = python();
    if let Err(why) = peer_available(&py) {
        println!("xtask peer: skipped: it needs {NEEDS}; {py}: {why}");
        return Ok(());
    }
    let workloads: Vec<Workload> = if quick {
        rounds = 1;
        WORKLOADS[..1].to_vec()
    } else {
        WORKLOADS
            .iter()
            .filter(|w| only.is_empty() || only.contains(&w.key()))
            .copied()
            .collect()
    };
    let mut build = cargo();
    build.args(["build", "--release", "-p", "memopt-cli"]);
    run(build)?;
    let target = target_dir()?;
    let settings = Settings {
        threads,
        steps,
        memopt: target.join("release").join("memopt"),
        python: py,
    };
    let load_before = load_average();
    // runs[w] = (memopt ms, peer ms) per round.
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); workloads.len()];
    let (mut torch, mut ours_path, mut torch_path) = (Value::Null, Value::Null, Value::Null);
    for round in 0..rounds {
        for (w, runs) in workloads.iter().zip(&mut runs) {
            let (ours, theirs) = if round % 2 == 0 {
                let ours = memopt_run(&settings, w)?;
                (ours, peer_run(&settings, w)?)
            } else {
                let theirs = peer_run(&settings, w)?;
                (memopt_run(&settings, w)?, theirs)
            };
            (torch, torch_path) = (theirs.1, theirs.2);
            let ours = match (&ours_path, ours.path) {
                (Value::Null, path) => {
                    ours_path = path;
                    ours.ms
                }
                (seen, path) if *seen == path => ours.ms,
                (seen, path) => {
                    return Err(format!(
                        "memopt's CPU path changed between runs: {seen} then {path}"
                    ));
                }
            };
            eprintln!(
                "xtask peer: round {}/{rounds} {:<22} memopt {ours:>9.1} ms  PyTorch+SpikingJelly {:>9.1} ms  ratio {:.2}  (load {:?})",
                round + 1,
                w.key(),
                theirs.0,
                ours / theirs.0,
                load_average().map(|l| l[0]),
            );
            runs.push((ours, theirs.0));
        }
    }
    let load_after = load_average();
    let mut rows = Vec::new();
    for (w, runs) in workloads.iter().zip(&runs) {
        let ours: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let theirs: Vec<f64> = runs.iter().map(|r| r.1).collect();
        let ratios: Vec<f64> = runs.iter().map(|r| r.0 / r.1).collect();
        let (a, b, r) = (median(&ours), median(&theirs), median(&ratios));
        println!(
            "{:<24} N={:<3} T={:<3} memopt {a:>10.1} ms   PyTorch+SpikingJelly {b:>10.1} ms   ratio {r:.2}",
            w.zoo, w.n, w.t
        );
        rows.push(json!({
            "model": w.zoo, "batch": w.n, "timesteps": w.t, "threads": threads, "steps": steps,
            "rounds": rounds, "memopt_ms": a, "pytorch_spikingjelly_ms": b, "ratio": r,
            "memopt_runs_ms": ours, "pytorch_spikingjelly_runs_ms": theirs, "ratios": ratios,
            "torch": torch,
        }));
    }
    let load = |l: Option<[f64; 3]>| {
        l.map_or_else(
            || "unknown".to_string(),
            |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]),
        )
    };
    let cpu = cpu_model();
    let paths = format!("memopt's CPU path {ours_path}, PyTorch's CPU capability {torch_path}");
    println!(
        "load average before {}, after {}; {cpu}; {paths}",
        load(load_before),
        load(load_after)
    );
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
        "\n{rounds} interleaved rounds, each a fresh process per side with one warm-up step and {steps} timed steps; \
         figures are medians over rounds (the ratio: median of the per-round ratios). {threads} threads on both sides \
         (RAYON_NUM_THREADS; torch.set_num_threads, OMP_NUM_THREADS). Load average before {}, after {}. \
         CPU: {cpu}; {paths}.\n",
        load(load_before),
        load(load_after)
    ));
    let doc = json!({
        "load_average_before": load_before, "load_average_after": load_after, "cpu": cpu,
        "memopt_cpu_path": ours_path, "torch_cpu_capability": torch_path, "workloads": rows,
    });
    write_results(&[
        (dir.join("peer.md"), md),
        (
            dir.join("peer.json"),
            serde_json::to_string_pretty(&doc).unwrap_or_default(),
        ),
    ])?;
    eprintln!("xtask: results in {}", dir.join("peer.md").display());
    Ok(())
}
