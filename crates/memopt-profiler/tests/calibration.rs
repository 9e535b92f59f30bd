//! Calibration fits the cost model's factors to a measurement exactly (synthetic timings whose
//! true factors are known, so nothing here depends on the machine's speed), reproduces the
//! measured steps, transfers to other workloads as ratios, and its file is strict about its
//! format and about where it applies.

use memopt_checkpoint::{ChunkBoundaries, InputSpec, Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::{DType, Device, Phase, Target};
use memopt_profiler::cost::{
    CALIBRATION_FORMAT, Calibration, CalibrationMeasurement, HostIdentity, ModuleCostEntry, Throughput,
    every_leaf_checkpointed,
};
use memopt_profiler::timing::{CodecTiming, ModuleTiming};
use memopt_profiler::{CostModel, TimingReport, Workload};

fn vgg(n: usize) -> Workload {
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![2, 48, 48],
        classes: 10,
    };
    Workload::zoo("cifar10dvs-vgg", spec, n)
}

fn model(w: &Workload) -> CostModel {
    CostModel::from_workload(w, Throughput::cpu_default()).unwrap()
}

fn raw_ms(m: &CostModel, e: &ModuleCostEntry) -> f64 {
    1e3 * (e.flops as f64 / m.throughput.flops_per_s + e.bytes as f64 / m.throughput.bytes_per_s)
}

/// The synthetic device's true factors by type: forward, backward, recompute as the leaf that
/// ends its segment.
fn truth(ty: &str) -> (f64, f64, f64) {
    match ty {
        "Conv2d" => (0.5, 0.75, 0.55),
        "BatchNorm2d" => (3.0, 7.0, 2.5),
        "LIFNode" => (4.0, 6.0, 3.0),
        "AvgPool2d" => (11.0, 6.0, 12.0),
        _ => (1.5, 1.25, 1.0),
    }
}

/// The synthetic device's compressor speeds (bytes of the unpacked input per second): pack,
/// unpack.
fn codec_truth(kind: CompressorKind) -> (f64, f64) {
    match kind {
        CompressorKind::BitSpike => (3e9, 5e9),
        _ => (6e9, 7e9),
    }
}

const OUTSIDE_FWD_MS: f64 = 3.0;
const OUTSIDE_BWD_MS: f64 = 5.0;
const OPTIMIZER_MS: f64 = 7.0;

fn timing(path: &str, ty: &str, phase: Phase, ms: f64) -> ModuleTiming {
    ModuleTiming {
        path: path.into(),
        module_type: ty.into(),
        phase,
        visits: 1,
        median_ms: ms,
        min_ms: ms,
        max_ms: ms,
        samples_ms: vec![ms],
    }
}

fn report(plan: Plan, step_ms: f64, modules: Vec<ModuleTiming>) -> TimingReport {
    TimingReport {
        workload: "synthetic".into(),
        device: Device::Cpu,
        plan,
        warmup_runs: 1,
        runs: 1,
        step_ms,
        step_samples_ms: vec![step_ms],
        modules,
    }
}

/// A step storing everything on the synthetic device.
fn baseline(m: &CostModel) -> TimingReport {
    let mut modules = Vec::new();
    let (mut fwd, mut bwd) = (0.0, 0.0);
    for e in m.modules.iter().filter(|e| e.leaf) {
        let (f, b, _) = truth(&e.module_type);
        let (tf, tb) = (f * raw_ms(m, e), b * 2.0 * raw_ms(m, e));
        fwd += tf;
        bwd += tb;
        modules.push(timing(&e.path, &e.module_type, Phase::Forward, tf));
        modules.push(timing(&e.path, &e.module_type, Phase::Backward, tb));
    }
    let (fwd, bwd) = (fwd + OUTSIDE_FWD_MS, bwd + OUTSIDE_BWD_MS);
    modules.push(timing("", "Sequential", Phase::Forward, fwd));
    modules.push(timing("", "Sequential", Phase::Backward, bwd));
    modules.push(timing("", "Sequential", Phase::Optimizer, OPTIMIZER_MS));
    report(Plan::store_all(), fwd + bwd + OPTIMIZER_MS, modules)
}

/// Time the synthetic device takes to pack and unpack the spike inputs of `path` with BitSpike,
/// and its pooled-spike inputs as spike counts (which move the bytes U8 moves, at its speed;
/// decompressed twice before a convolution or linear layer, which keeps the counts).
fn packing_ms(m: &CostModel, path: &str) -> f64 {
    let (pack, unpack) = codec_truth(CompressorKind::BitSpike);
    let (count_pack, count_unpack) = codec_truth(CompressorKind::U8);
    let e = m.modules.iter().find(|e| e.path == path).unwrap();
    // A segment whose first layer is a convolution or a linear layer reads packed f32 spikes
    // packed: it unpacks them twice (in the recomputation and for the weight gradient).
    let first_layer = m
        .modules
        .iter()
        .find(|l| l.leaf && memopt_core::ModulePath::from(l.path.as_str()).is_under(path));
    let reads_packed = first_layer.is_some_and(|l| matches!(l.module_type.as_str(), "Conv2d" | "Linear"));
    let counts: f64 = e
        .inputs
        .iter()
        .filter(|x| x.pooled_spike_window.is_some())
        .map(|x| {
            let unpacks = if reads_packed { 2.0 } else { 1.0 };
            1e3 * x.bytes() as f64 * (1.0 / count_pack + unpacks / count_unpack)
        })
        .sum();
    let spikes: f64 = e
        .inputs
        .iter()
        .filter(|x| x.is_spike)
        .map(|x| {
            let unpacks = if reads_packed && x.dtype == DType::F32 {
                2.0
            } else {
                1.0
            };
            1e3 * x.bytes() as f64 * (1.0 / pack + unpacks / unpack)
        })
        .sum();
    counts + spikes
}

/// The same step with every leaf checkpointed: each leaf recomputes once at its true recompute
/// factor and its spike inputs are packed and unpacked at the true speeds.
fn checkpointed(m: &CostModel, base: &TimingReport, plan: &Plan) -> TimingReport {
    let mut modules = base.modules.clone();
    let mut extra = 0.0;
    for e in m.modules.iter().filter(|e| e.leaf) {
        let t = truth(&e.module_type).2 * raw_ms(m, e);
        extra += t + packing_ms(m, &e.path);
        modules.push(timing(&e.path, &e.module_type, Phase::Recompute, t));
    }
    report(plan.clone(), base.step_ms + extra, modules)
}

fn codecs(m: &CostModel) -> Vec<CodecTiming> {
    let shape = memopt_profiler::cost::largest_spike_input(m).unwrap();
    let bytes = 4 * shape.iter().product::<usize>() as u64;
    [CompressorKind::BitSpike, CompressorKind::U8]
        .into_iter()
        .map(|kind| {
            let (pack, unpack) = codec_truth(kind);
            CodecTiming {
                compressor: kind,
                shape: shape.clone(),
                input_bytes: bytes,
                compress_ms: 1e3 * bytes as f64 / pack,
                decompress_ms: 1e3 * bytes as f64 / unpack,
            }
        })
        .collect()
}

fn host() -> HostIdentity {
    HostIdentity {
        cpu: "Synthetic CPU".into(),
        threads: 2,
        build: "release".into(),
    }
}

fn measurement(m: &CostModel) -> (CalibrationMeasurement, Plan) {
    let base = baseline(m);
    let plan = every_leaf_checkpointed(m);
    let ckpt = checkpointed(m, &base, &plan);
    let measured = CalibrationMeasurement {
        baseline: base,
        checkpointed: ckpt,
        codecs: codecs(m),
        host_link: Some(host_link(m)),
    };
    (measured, plan)
}

/// The synthetic host link: 5 GB/s to host memory, 10 GB/s back.
const TO_HOST: f64 = 5e9;
const FROM_HOST: f64 = 10e9;

fn host_link(m: &CostModel) -> CodecTiming {
    let shape = memopt_profiler::cost::largest_spike_input(m).unwrap();
    let bytes = 4 * shape.iter().product::<usize>() as u64;
    CodecTiming {
        compressor: CompressorKind::Null,
        shape,
        input_bytes: bytes,
        compress_ms: 1e3 * bytes as f64 / TO_HOST,
        decompress_ms: 1e3 * bytes as f64 / FROM_HOST,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn calibration_fits_known_factors_and_reproduces_the_measured_steps() {
    let w = vgg(2);
    let m = model(&w);
    let (measured, plan) = measurement(&m);
    let c = Calibration::fit(&m, &measured, Device::Cpu, host()).unwrap();
    // Every type with work to do is measured, and its factors are the true ones.
    let mut types: Vec<&str> = m
        .modules
        .iter()
        .filter(|e| e.leaf && raw_ms(&m, e) > 0.0)
        .map(|e| e.module_type.as_str())
        .collect();
    types.dedup();
    assert!(types.contains(&"Conv2d") && types.contains(&"LIFNode") && types.contains(&"BatchNorm2d"));
    for ty in types {
        let f = c.factors[ty];
        let (tf, tb, tr) = truth(ty);
        assert!(
            close(f.forward, tf) && close(f.backward, tb) && close(f.recompute_last, tr),
            "{ty}: fitted {f:?}, true ({tf}, {tb}, {tr})"
        );
    }
    for kind in [CompressorKind::BitSpike, CompressorKind::U8] {
        let speed = c.codecs[kind.name()];
        let (pack, unpack) = codec_truth(kind);
        assert!(close(speed.compress_bytes_per_s, pack) && close(speed.decompress_bytes_per_s, unpack));
    }
    assert_eq!(c.measured_on.checkpointed_leaves, plan.entries.len());
    assert!(close(c.measured_on.baseline_step_ms, measured.baseline.step_ms));
    // Applied to a fresh model of the workload it was measured on, it predicts both measured
    // steps: the baseline, and the extra time of checkpointing every leaf.
    let mut fresh = model(&w);
    let applied = c.apply(&mut fresh);
    assert!(applied.unmeasured_types.is_empty(), "{applied:?}");
    assert!(close(fresh.forward_overhead_ms, OUTSIDE_FWD_MS));
    assert!(close(fresh.backward_overhead_ms, OUTSIDE_BWD_MS));
    assert!(close(fresh.optimizer_update_ms(), OPTIMIZER_MS));
    assert!(close(fresh.baseline_step_ms(), measured.baseline.step_ms));
    let predicted = fresh.baseline_step_ms() + fresh.plan_extra_ms(&plan);
    assert!(
        close(predicted, measured.checkpointed.step_ms),
        "{predicted} vs {}",
        measured.checkpointed.step_ms
    );
    // A plan it was not measured on: a nested checkpoint recomputes its inside once per
    // enclosing entry, and packs each entry's input once. A segment's leaves run their forward
    // (their outputs are read) but the one that ends it (`last`), which runs as it did
    // checkpointed alone.
    let nested = Plan::from_entries([
        ("features.1", Policy::CHECKPOINT),
        ("features", Policy::CHECKPOINT),
    ]);
    let recompute = |path: &str, last: &str| -> f64 {
        m.modules
            .iter()
            .filter(|e| e.leaf && memopt_core::ModulePath::from(e.path.as_str()).is_under(path))
            .map(|e| {
                let (forward, _, recompute) = truth(&e.module_type);
                (if e.path == last { recompute } else { forward }) * raw_ms(&m, e)
            })
            .sum()
    };
    let expected = recompute("features", "features.8")
        + recompute("features.1", "features.1.neuron")
        + packing_ms(&m, "features")
        + packing_ms(&m, "features.1");
    assert!(
        close(fresh.plan_extra_ms(&nested), expected),
        "{} vs {expected}",
        fresh.plan_extra_ms(&nested)
    );
    // Before calibration the same plan is priced by the throughput guess, which is not the truth.
    assert!(!close(m.plan_extra_ms(&nested), expected));
}

#[test]
fn the_fit_refuses_measurements_that_cannot_calibrate() {
    let m = model(&vgg(2));
    let (measured, _) = measurement(&m);
    let mut wrong_baseline = measured.clone();
    wrong_baseline.baseline.plan = Plan::from_entries([("features.1", Policy::CHECKPOINT)]);
    let e = Calibration::fit(&m, &wrong_baseline, Device::Cpu, host())
        .unwrap_err()
        .to_string();
    assert!(e.contains("must store everything"), "{e}");
    let mut nothing_recomputed = measured.clone();
    nothing_recomputed.checkpointed = measured.baseline.clone();
    let e = Calibration::fit(&m, &nothing_recomputed, Device::Cpu, host())
        .unwrap_err()
        .to_string();
    assert!(e.contains("recomputed none"), "{e}");
}

#[test]
fn a_calibration_round_trips_and_transfers_as_ratios() {
    let m = model(&vgg(2));
    let (measured, plan) = measurement(&m);
    let c = Calibration::fit(&m, &measured, Device::Cpu, host()).unwrap();
    assert_eq!(c.format, CALIBRATION_FORMAT);
    assert_eq!(Calibration::from_json(&c.to_json()).unwrap(), c);
    let mut small = model(&vgg(2));
    c.apply(&mut small);
    // On a larger batch the factors are the same, the time outside modules grows with the
    // modules' time, and the optimizer's stays (same parameters).
    let mut bigger = model(&vgg(4));
    c.apply(&mut bigger);
    assert_eq!(bigger.factors, small.factors);
    assert!(bigger.forward_overhead_ms > small.forward_overhead_ms);
    assert!(close(bigger.optimizer_update_ms(), small.optimizer_update_ms()));
    assert!(bigger.plan_extra_ms(&plan) > small.plan_extra_ms(&plan));
    // A model with a type the calibration never ran: named, and priced at the overall factors.
    let toy = Workload::zoo_small("toy-if", 4).unwrap();
    let mut other = model(&toy);
    let applied = c.apply(&mut other);
    assert_eq!(applied.unmeasured_types, vec!["IFNode".to_string()]);
    assert_eq!(other.factors["IFNode"], c.overall);
    assert_eq!(other.factors["Linear"], c.factors["Linear"]);
}

#[test]
fn a_calibration_applies_only_to_its_device_and_host() {
    let m = model(&vgg(2));
    let (measured, _) = measurement(&m);
    let cpu = Calibration::fit(&m, &measured, Device::Cpu, host()).unwrap();
    let here = host();
    cpu.check_applies(Device::Cpu, &here).unwrap();
    // Planning on Meta for the CPU is planning for the CPU.
    cpu.check_applies(Device::META, &here).unwrap();
    let err = |r: memopt_profiler::Result<()>| r.unwrap_err().to_string();
    let e = err(cpu.check_applies(Device::Meta(Target::Cuda), &here));
    assert!(
        e.contains("measured on cpu") && e.contains("memopt calibrate --device cuda:N"),
        "{e}"
    );
    let e = err(cpu.check_applies(Device::Cuda(0), &here));
    assert!(
        e.contains("measured on cpu") && e.contains("--device cuda:0"),
        "{e}"
    );
    let more_threads = HostIdentity {
        threads: 16,
        ..host()
    };
    let e = err(cpu.check_applies(Device::Cpu, &more_threads));
    assert!(e.contains("2 threads") && e.contains("16 threads"), "{e}");
    let dev_build = HostIdentity {
        build: "dev".into(),
        ..host()
    };
    assert!(err(cpu.check_applies(Device::Cpu, &dev_build)).contains("dev build"));
    // A GPU calibration: its ordinal and build, not the host CPU.
    let gpu = Calibration::fit(&m, &measured, Device::Cuda(1), host()).unwrap();
    gpu.check_applies(Device::Cuda(1), &more_threads).unwrap();
    gpu.check_applies(Device::Meta(Target::Cuda), &here).unwrap();
    assert!(err(gpu.check_applies(Device::Cuda(0), &here)).contains("measured on cuda:1"));
    assert!(err(gpu.check_applies(Device::Cpu, &here)).contains("measured on cuda:1"));
}

#[test]
fn bad_calibration_files_are_refused_with_the_reason() {
    let m = model(&vgg(2));
    let (measured, _) = measurement(&m);
    let good = Calibration::fit(&m, &measured, Device::Cpu, host())
        .unwrap()
        .to_json();
    let err = |text: &str| Calibration::from_json(text).unwrap_err().to_string();
    let replaced = |from: &str, to: &str| {
        assert!(good.contains(from), "{from} not in {good}");
        good.replacen(from, to, 1)
    };
    assert!(err(&replaced("\"format\": 1", "\"format\": 2")).contains("format 2 is not supported"));
    assert!(
        err(&replaced("\"backward_ratio\": 2.0", "\"backward_ratio\": -2.0"))
            .contains("backward_ratio is -2")
    );
    let e = err(&replaced("\"forward_outside\": ", "\"forward_outside\": -"));
    assert!(e.contains("forward_outside"), "{e}");
    let e = err(&replaced("\"format\": 1,", "\"format\": 1, \"extra\": 1,"));
    assert!(e.contains("extra"), "{e}");
    let e = err(&replaced("\"format\": 1,", "\"format\": 1, \"format\": 1,"));
    assert!(e.contains("format"), "{e}");
    assert!(err(&replaced("\"device\": \"cpu\"", "\"device\": \"meta\"")).contains("device is meta"));
    assert!(err(&replaced("\"device\": \"cpu\"", "\"device\": \"tpu\"")).contains("unknown device 'tpu'"));
    assert!(err(&replaced("\"bit_spike\":", "\"zip\":")).contains("codecs.zip: no such compressor"));
    assert!(err(&replaced("\"threads\": 2", "\"threads\": 0")).contains("host.threads is 0"));
    let e = err(&replaced(
        "\"compress_bytes_per_s\": ",
        "\"compress_bytes_per_s\": -",
    ));
    assert!(e.contains("compress_bytes_per_s") && e.contains("above 0"), "{e}");
    // A factor's field missing.
    let e = err(&replaced("\"recompute_last\": ", "\"recompute_\": "));
    assert!(e.contains("recompute"), "{e}");
    // Calibrations written before the distinction call the same measurement `recompute`.
    let old = Calibration::from_json(&good.replace("\"recompute_last\": ", "\"recompute\": ")).unwrap();
    assert_eq!(old, Calibration::from_json(&good).unwrap());
    assert!(err("[]").contains("not a calibration file"));
    assert!(err("").contains("not a calibration file"));
}

#[test]
fn calibrated_packing_prices_spike_inputs_only() {
    let m = model(&vgg(2));
    let (measured, _) = measurement(&m);
    let c = Calibration::fit(&m, &measured, Device::Cpu, host()).unwrap();
    let mut cal = model(&vgg(2));
    c.apply(&mut cal);
    let entry = |path: &str, compressor| PlanEntry {
        path: path.into(),
        children: None,
        into_next: 0,
        policy: Policy::checkpoint(compressor, 1),
    };
    // features.2 takes spikes: BitSpike costs its measured packing; features.0 takes the
    // (non-spike) input frames, kept as they are.
    let spikes = entry("features.2", CompressorKind::BitSpike);
    assert!(close(
        cal.saved_input_ms(&spikes.path, spikes.policy),
        packing_ms(&m, "features.2")
    ));
    assert!(cal.saved_input_ms(&spikes.path, spikes.policy) > 0.0);
    let frames = entry("features.0", CompressorKind::BitSpike);
    assert_eq!(cal.saved_input_ms(&frames.path, frames.policy), 0.0);
    // A compressor the calibration did not time is priced by bytes moved, as uncalibrated.
    let sparse = entry("features.2", CompressorKind::Sparse);
    let guess =
        1e3 * cal.saved_input_traffic(&sparse.path, sparse.policy) as f64 / cal.throughput.bytes_per_s;
    assert!(close(cal.saved_input_ms(&sparse.path, sparse.policy), guess) && guess > 0.0);
}

#[test]
fn calibrated_offloads_are_priced_at_the_measured_host_link() {
    let m = model(&vgg(2));
    let (measured, _) = measurement(&m);
    let c = Calibration::fit(&m, &measured, Device::Cpu, host()).unwrap();
    let link = c.host_link.expect("the host link was measured");
    assert!(close(link.compress_bytes_per_s, TO_HOST) && close(link.decompress_bytes_per_s, FROM_HOST));
    let mut cal = model(&vgg(2));
    c.apply(&mut cal);
    // features.0 takes the input frames, kept whole: the payload is the input.
    let payload = cal
        .modules
        .iter()
        .find(|e| e.path == "features.0")
        .unwrap()
        .inputs[0]
        .bytes() as f64;
    let once = 1e3 * payload * (1.0 / TO_HOST + 1.0 / FROM_HOST);
    assert!(close(
        cal.saved_input_ms("features.0", Policy::offload(CompressorKind::BitSpike, 1)),
        once
    ));
    assert_eq!(cal.saved_input_ms("features.0", Policy::CHECKPOINT), 0.0);
    // In time chunks the backward brings the payload back once per pass: the backward and the
    // block's BatchNorm gradient-sums pass; replayed boundaries (T = 4, two chunks) re-read the
    // first chunk in each pass too. Kept boundary states (the LIF's membrane potential, one
    // time step of its input, at the one boundary) go out once and come back once per pass;
    // replayed boundaries keep none.
    let lif = cal
        .modules
        .iter()
        .find(|e| e.path == "features.0.neuron")
        .unwrap();
    let t = lif.inputs[0].shape.dims()[0] as u64;
    assert!(lif.state_bytes > 0 && lif.state_bytes == lif.inputs[0].bytes() / t);
    let states: u64 = cal
        .modules
        .iter()
        .filter(|e| e.path.starts_with("features.0."))
        .map(|e| e.state_bytes)
        .sum();
    assert_eq!(states, lif.state_bytes, "the LIF is the block's only state");
    let state_copies = 1e3 * states as f64 * (1.0 / TO_HOST + 2.0 / FROM_HOST);
    // Boundary states move only where the host is separate (a GPU target); on the CPU they
    // stay, and cost nothing.
    assert!(!cal.separate_host);
    let on_cpu = cal.plan_extra_ms(&Plan::from_entries([(
        "features.0",
        Policy::offload(CompressorKind::BitSpike, 2),
    )])) - cal.plan_extra_ms(&Plan::from_entries([(
        "features.0",
        Policy::checkpoint(CompressorKind::BitSpike, 2),
    )]));
    assert!(close(on_cpu, 1e3 * payload * (1.0 / TO_HOST + 2.0 / FROM_HOST)));
    cal.separate_host = true;
    let extra = |p: Policy| cal.plan_extra_ms(&Plan::from_entries([("features.0", p)]));
    let offload = |boundaries| Policy::Offload {
        compressor: CompressorKind::BitSpike,
        chunks: 2,
        boundaries,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let checkpoint = |boundaries| Policy::Checkpoint {
        compressor: CompressorKind::BitSpike,
        chunks: 2,
        boundaries,
        batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
    };
    let copies = |restores: f64| 1e3 * payload * (1.0 / TO_HOST + restores / FROM_HOST);
    for (boundaries, restores, states) in [
        (ChunkBoundaries::Kept, 2.0, state_copies),
        (ChunkBoundaries::Replayed, 3.0, 0.0),
        // Two chunks, every other boundary kept: the one boundary is replayed.
        (ChunkBoundaries::KeptEvery(2), 3.0, 0.0),
        (ChunkBoundaries::KeptEvery(1), 2.0, state_copies),
    ] {
        let added = extra(offload(boundaries)) - extra(checkpoint(boundaries));
        let expected = copies(restores) + states;
        assert!(close(added, expected), "{boundaries:?}: {added} vs {expected}");
    }
    // Without a measured link (calibrations written before it), at `throughput.bytes_per_s`.
    let mut old = c.clone();
    old.host_link = None;
    let mut guessed = model(&vgg(2));
    old.apply(&mut guessed);
    let per_s = guessed.throughput.bytes_per_s;
    assert!(close(
        guessed.saved_input_ms("features.0", Policy::offload(CompressorKind::BitSpike, 1)),
        2e3 * payload / per_s
    ));
    let json = old.to_json();
    assert!(!json.contains("host_link"), "{json}");
    assert_eq!(Calibration::from_json(&json).unwrap(), old);
    // For a GPU target without a measured link: the uncalibrated guess of the calibrated speed
    // (the memory guess over the overall forward factor), as uncalibrated GPU targets are.
    let mut gpu_workload = vgg(2);
    gpu_workload.target = Target::Cuda;
    let mut gpu = model(&gpu_workload);
    assert!(gpu.separate_host);
    assert_eq!(
        gpu.host_link,
        Some(CostModel::guessed_gpu_host_link(gpu.throughput)),
        "uncalibrated"
    );
    old.apply(&mut gpu);
    let speed =
        gpu.throughput.bytes_per_s / old.overall.forward / memopt_profiler::cost::GPU_MEMORY_OVER_HOST_LINK;
    let link = gpu.host_link.expect("guessed");
    assert!(close(link.compress_bytes_per_s, speed) && close(link.decompress_bytes_per_s, speed));
    c.apply(&mut gpu);
    assert_eq!(gpu.host_link, c.host_link, "a measured link wins");
}
