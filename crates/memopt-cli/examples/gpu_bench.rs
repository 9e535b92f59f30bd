//! The GPU benchmark of the GPU bundle (`cargo xtask gpu-bundle`), run as
//! `gpu_bench --out figures.json`:
//!
//! - the CIFAR10-DVS VGG at its published size (T = 10) with N = 32: storing everything and the
//!   best plan within 20% predicted overhead (`max-overhead 0.2`), each with its tracker peak
//!   (bytes), the planned peak, and the median step time (ms, after one warm-up step);
//! - BitSpike pack and unpack of 2^26 spikes on the GPU as a fraction of device-to-device copy
//!   bandwidth (bytes read + written per second; the goal is >= 0.8).
//!
//! Every figure is measured here; a part that cannot run records its error instead of a figure,
//! and the exit status is then 1. Without a GPU it prints why and exits 0, or 1 under
//! MEMOPT_REQUIRE_GPU=1.

use memopt_checkpoint::Plan;
use memopt_cli::steps::run_steps;
use memopt_compress::CompressorKind;
use memopt_core::storage::cuda_context;
use memopt_core::{Device, MemoryKind, Tensor};
use memopt_profiler::Workload;
use memopt_search::{MaxOverhead, PlanningSession, Strategy};
use serde_json::{Value, json};
use std::time::Instant;

const GPU: Device = Device::Cuda(0);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = match args.iter().position(|a| a == "--out") {
        Some(i) => match args.get(i + 1) {
            Some(p) => Some(p.clone()),
            None => {
                eprintln!("error: --out needs a file path");
                std::process::exit(2);
            }
        },
        None => None,
    };
    if let Err(why) = memopt_core::cuda::gpu_with_nvrtc() {
        eprintln!("gpu_bench: no GPU to measure on: {why}");
        let required = std::env::var("MEMOPT_REQUIRE_GPU").as_deref() == Ok("1");
        std::process::exit(required as i32);
    }
    let mut failed = false;
    let mut record = |part: Result<Value, String>| match part {
        Ok(v) => v,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            failed = true;
            json!({ "error": e })
        }
    };
    let vgg = record(vgg_figures());
    let bitspike = record(bitspike_figures());
    let figures = json!({ "cifar10dvs_vgg_n32_t10": vgg, "bitspike_bandwidth": bitspike });
    let text = serde_json::to_string_pretty(&figures).unwrap_or_default();
    println!("{text}");
    if let Some(path) = out
        && let Err(e) = std::fs::write(&path, &text)
    {
        eprintln!("error: cannot write {path}: {e}");
        failed = true;
    }
    std::process::exit(failed as i32);
}

fn vgg_figures() -> Result<Value, String> {
    let entry = memopt_checkpoint::zoo::entry("cifar10dvs-vgg").map_err(|e| e.to_string())?;
    let workload = Workload::zoo("cifar10dvs-vgg", entry.published.clone(), 32);
    let mut session = PlanningSession::new(&workload).map_err(|e| e.to_string())?;
    let report = MaxOverhead { max_overhead: 0.2 }
        .plan(&mut session)
        .map_err(|e| e.to_string())?;
    const TIMED: usize = 5;
    let run = |plan: &Plan| -> Result<Value, String> {
        let r = run_steps(&workload, plan, GPU, TIMED).map_err(|e| e.to_string())?;
        Ok(json!({
            "peak_bytes": r.peak_bytes(),
            "median_step_ms": r.median_step_ms(),
            "step_ms": r.step_ms,
            "loss": r.record.loss_bits.map(f32::from_bits),
        }))
    };
    let base = run(&Plan::store_all())?;
    let planned = run(&report.plan)?;
    let ratio = |k: &str| match (planned[k].as_f64(), base[k].as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!(a / b),
        _ => Value::Null,
    };
    Ok(json!({
        "timesteps": entry.published.time_steps,
        "batch": 32,
        "meta_baseline_peak_bytes": report.baseline_peak_bytes,
        "meta_planned_peak_bytes": report.planned_peak_bytes,
        "predicted_overhead": report.predicted_overhead,
        "plan_entries": report.plan.entries.len(),
        "baseline": base,
        "planned": planned,
        "peak_ratio": ratio("peak_bytes"),
        "step_time_ratio": ratio("median_step_ms"),
        "reserved_bytes": Value::Null,
        "reserved_note": "the caching allocator's CUDA segments are not in this build; reserved bytes are not measured",
    }))
}

/// Median wall time (ms) of `reps` runs of `f`, each followed by a stream synchronisation.
fn time_ms(reps: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let stream = cuda_context(0).map_err(|e| e.to_string())?.default_stream();
    let sync = || stream.synchronize().map_err(|e| e.to_string());
    f()?;
    sync()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        sync()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn bitspike_figures() -> Result<Value, String> {
    let n: usize = 1 << 26;
    let host: Vec<f32> = (0..n as u64)
        .map(|i| ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) == 0) as u32 as f32)
        .collect();
    let x = Tensor::from_vec(host, [n], GPU, MemoryKind::Input)
        .map_err(|e| e.to_string())?
        .with_spike_flag(true);
    let c = CompressorKind::BitSpike.build();
    let copy_ms = time_ms(11, || {
        x.deep_copy(MemoryKind::Activation)
            .map(drop)
            .map_err(|e| e.to_string())
    })?;
    let pack_ms = time_ms(11, || c.compress(&x).map(drop).map_err(|e| e.to_string()))?;
    let packed = c.compress(&x).map_err(|e| e.to_string())?;
    let unpack_ms = time_ms(11, || c.decompress(&packed).map(drop).map_err(|e| e.to_string()))?;
    let (full, bits) = ((n * 4) as f64, n.div_ceil(8) as f64);
    // Bytes read + written per second, in GB/s.
    let gbps = |bytes: f64, ms: f64| bytes / (ms * 1e-3) / 1e9;
    let copy = gbps(2.0 * full, copy_ms);
    let pack = gbps(full + bits, pack_ms);
    let unpack = gbps(bits + full, unpack_ms);
    Ok(json!({
        "values": n,
        "copy_ms": copy_ms, "pack_ms": pack_ms, "unpack_ms": unpack_ms,
        "copy_gbps": copy, "pack_gbps": pack, "unpack_gbps": unpack,
        "pack_fraction_of_copy": pack / copy,
        "unpack_fraction_of_copy": unpack / copy,
        "note": "each time includes allocating its output through the tracker",
    }))
}
