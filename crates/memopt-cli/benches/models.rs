//! Whole-model tables: every zoo model at its small size x every strategy: exact peak, measured
//! CPU peak and step time (median of a few steps), measured and predicted overhead, planning
//! time, gradients bit-identical or not. Written as markdown and JSON.
//!
//! `cargo bench -p memopt-cli --bench models -- [--quick] [--out DIR] [--models a,b] [--batch N]`
//! (`cargo xtask bench` runs it with `--out target/bench`).

use memopt_checkpoint::zoo;
use memopt_cli::bench::{BenchReport, bench};
use memopt_cli::format::utc_date;
use memopt_cli::selection::ModelArgs;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Serialize)]
struct Tables {
    /// UTC date of the run, `YYYY-MM-DD`.
    date: String,
    /// Hardware threads of the machine.
    nproc: usize,
    /// Quick mode (one timed step per row) or not (five).
    quick: bool,
    /// One report per model.
    models: Vec<BenchReport>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let out = PathBuf::from(value("--out").unwrap_or_else(|| "target/bench".into()));
    let batch: usize = value("--batch").and_then(|b| b.parse().ok()).unwrap_or(4);
    let names: Vec<String> = match value("--models") {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => zoo::entries().iter().map(|e| e.name.to_string()).collect(),
    };
    let timed = if quick { 1 } else { 5 };
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut reports = Vec::new();
    let mut md = format!(
        "# memopt: every zoo model x every strategy\n\n{} on {nproc} hardware threads, {} mode \
         ({timed} timed CPU step(s) per row after one for the peak and gradients), batch {batch}, \
         each model at its small size (`memopt models`).\n\nPeaks are exact (a Meta step); \
         `measured peak` is a real CPU step's tracker peak; overheads are step-time ratios to the \
         baseline minus one, measured in the same run; planning ms excludes the session setup.\n",
        utc_date(now),
        if quick { "quick" } else { "full" }
    );
    for name in &names {
        let started = Instant::now();
        eprintln!("models bench: {name} ...");
        let selection = match (ModelArgs {
            model: Some(name.clone()),
            batch: Some(batch),
            ..ModelArgs::default()
        })
        .resolve(None)
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        };
        match bench(
            &selection,
            timed,
            None,
            memopt_core::Device::Cpu,
            None,
            &[],
            memopt_search::builder::OptionSpace::default(),
        ) {
            Ok(r) => {
                md.push_str(&format!(
                    "\n## {name}\n\n{}; planning session setup {:.1} ms\n\n{}",
                    selection.describe(),
                    r.session_setup_ms,
                    r.markdown()
                ));
                eprintln!(
                    "models bench: {name} done in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                reports.push(r);
            }
            Err(e) => {
                eprintln!("error: {name}: {e}");
                std::process::exit(1);
            }
        }
    }
    let tables = Tables {
        date: utc_date(now),
        nproc,
        quick,
        models: reports,
    };
    let json = serde_json::to_string_pretty(&tables).unwrap_or_default();
    // Both tables are written together, atomically, once every model has succeeded.
    let written = std::fs::create_dir_all(&out)
        .map_err(|e| format!("cannot create {}: {e}", out.display()))
        .and_then(|()| {
            let mut outputs = memopt_cli::files::Outputs::default();
            outputs.stage(&out.join("models.md"), md.clone());
            outputs.stage(&out.join("models.json"), json);
            outputs.commit().map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    eprintln!("wrote {} and models.json", out.join("models.md").display());
    print!("{md}");
}
