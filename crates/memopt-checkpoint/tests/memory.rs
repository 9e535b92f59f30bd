//! Policies lower the tracked memory of a training step the way the sizes predict, and the
//! Meta device predicts the CPU figures to the byte.

mod common;

use common::{batch, trainer, zoo_small};
use memopt_checkpoint::{ChunkBoundaries, InputSpec, Model, Plan, Policy, StepOptions, zoo};
use memopt_compress::CompressorKind;
use memopt_core::memory::{MemoryEvent, MemorySubscriber, Phase};
use memopt_core::{Device, MemoryKind, MemoryTracker};
use std::sync::{Arc, Mutex};

/// Bytes held when the forward pass ends (the last forward event).
#[derive(Default)]
struct EndOfForward(Mutex<u64>);

impl MemorySubscriber for EndOfForward {
    fn on_event(&self, e: &MemoryEvent) {
        if e.scope.phase() == Phase::Forward {
            *self.0.lock().unwrap() = e.current_bytes;
        }
    }
}

struct Figures {
    peak: u64,
    end_of_forward: u64,
    packed_peak: u64,
}

/// One training step on `device` under `plan`, on a fresh tracker (parameters, optimizer state
/// and batch included).
fn step(build: &dyn Fn(Device) -> Model, plan: &Plan, device: Device, n: usize) -> Figures {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let eof = Arc::new(EndOfForward::default());
    let _sub = tracker.subscribe(eof.clone());
    let mut model = build(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = trainer(&model);
    let batch = batch(&model, n, 0);
    trainer.step(&model, &batch, StepOptions::default()).unwrap();
    let end_of_forward = *eof.0.lock().unwrap();
    Figures {
        peak: tracker.peak_bytes(),
        end_of_forward,
        packed_peak: tracker.stats().kind(MemoryKind::Packed).peak,
    }
}

fn vgg_blocks(compressor: CompressorKind) -> Plan {
    Plan::from_entries((0..8).map(|i| (format!("features.{i}"), Policy::checkpoint(compressor, 1))))
}

fn vgg(d: Device) -> Model {
    zoo_small("cifar10dvs-vgg", d, 0)
}

/// [`vgg`] on 2x32x32 inputs instead of 2x48x48 (2.25 times less compute for a CPU step): the
/// same blocks at its small T=4.
fn vgg_32(d: Device) -> Model {
    let spec = InputSpec {
        sample: vec![2, 32, 32],
        ..zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    zoo::build("cifar10dvs-vgg", &spec, d, 0).unwrap()
}

#[test]
fn checkpointing_every_vgg_block_lowers_the_peak_on_cpu_exactly_as_meta_predicts() {
    let vgg = vgg_32;
    let store = step(&vgg, &Plan::store_all(), Device::Cpu, 2);
    let ckpt = step(&vgg, &vgg_blocks(CompressorKind::BitSpike), Device::Cpu, 2);
    assert!(ckpt.peak < store.peak, "{} vs {}", ckpt.peak, store.peak);
    assert!(ckpt.end_of_forward < store.end_of_forward);
    for (plan, cpu) in [
        (Plan::store_all(), &store),
        (vgg_blocks(CompressorKind::BitSpike), &ckpt),
    ] {
        let meta = step(&vgg, &plan, Device::META, 2);
        assert_eq!(
            (meta.peak, meta.end_of_forward),
            (cpu.peak, cpu.end_of_forward),
            "Meta predicts the CPU to the byte"
        );
    }
}

#[test]
fn bit_packing_the_saved_spike_inputs_saves_exactly_their_size_difference() {
    let n = 8;
    let null = step(&vgg, &vgg_blocks(CompressorKind::Null), Device::META, n);
    let bits = step(&vgg, &vgg_blocks(CompressorKind::BitSpike), Device::META, n);
    // Blocks 1..7 take spikes [T=4, N, C, H, W] (block 0 takes the raw input, kept as it is).
    // At the end of the forward pass every block holds its saved input: f32 under Null, one
    // bit per value under BitSpike.
    let inputs: [(usize, usize); 7] = [
        (64, 48),
        (128, 48),
        (256, 24),
        (256, 24),
        (512, 12),
        (512, 12),
        (512, 6),
    ];
    let elems: Vec<u64> = inputs.iter().map(|&(c, h)| (4 * n * c * h * h) as u64).collect();
    let packed: u64 = elems.iter().map(|e| e.div_ceil(8)).sum();
    let f32_bytes: u64 = elems.iter().map(|e| 4 * e).sum();
    assert_eq!(bits.packed_peak, packed, "one bit per saved spike");
    assert_eq!(
        null.end_of_forward - bits.end_of_forward,
        f32_bytes - packed,
        "saved bytes fall by exactly the size difference"
    );
    // The step's peak is the recomputation of block 1, where only blocks 0 and 1 still hold a
    // saved input (block 1's decompressed): compression cannot lower it and does not raise it.
    assert!(bits.peak <= null.peak);
}

#[test]
fn chunks_lower_the_peak_of_long_sequences() {
    // toy-if at its published size (T = 16, C = 512): a batch large enough for activations to
    // outweigh the parameters.
    let build = |d| {
        let spec = zoo::entry("toy-if").unwrap().published;
        zoo::build("toy-if", &spec, d, 0).unwrap()
    };
    let plan = |chunks| {
        Plan::from_entries((0..3).map(move |i| {
            let p = Policy::checkpoint(CompressorKind::BitSpike, chunks);
            (i.to_string(), p)
        }))
    };
    let peaks: Vec<u64> = [1, 2, 4]
        .iter()
        .map(|&k| step(&build, &plan(k), Device::META, 128).peak)
        .collect();
    assert!(
        peaks[1] < peaks[0] && peaks[2] < peaks[1],
        "peaks for 1, 2, 4 chunks: {peaks:?}"
    );
}

#[test]
fn offload_on_the_cpu_is_accounted_as_offloaded_memory() {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = zoo_small("toy-if", Device::Cpu, 0);
    let offload = Policy::offload(CompressorKind::Null, 1);
    model
        .apply_plan(&Plan::from_entries([("1", offload), ("2", offload)]))
        .unwrap();
    let mut trainer = trainer(&model);
    trainer
        .step(&model, &batch(&model, 2, 0), StepOptions::default())
        .unwrap();
    assert!(
        tracker.stats().kind(MemoryKind::Offloaded).peak > 0,
        "the saved inputs were copied to host memory"
    );
    assert_eq!(
        tracker.stats().kind(MemoryKind::Offloaded).current,
        0,
        "and released after backward"
    );
}

#[test]
fn offload_for_a_gpu_takes_saved_inputs_off_the_device() {
    // Meta of a GPU: offloaded payloads go to Meta of the CPU, a tracker of its own, as a GPU's
    // go to the CPU. Checkpointed and offloaded in two time chunks, the device holds at the end
    // of forward exactly the offloaded bytes less; the host held them until backward.
    let gpu = Device::Meta(memopt_core::Target::Cuda);
    let host = MemoryTracker::new(Device::META);
    let _host = MemoryTracker::install(host.clone());
    let plan = |p: Policy| Plan::from_entries([("1", p), ("2", p)]);
    let build = |d| zoo_small("toy-if", d, 0);
    let checkpointed = step(&build, &plan(Policy::checkpoint(CompressorKind::Null, 2)), gpu, 4);
    assert_eq!(
        host.peak_bytes(),
        0,
        "checkpointing keeps everything on the device"
    );
    let offloaded = step(&build, &plan(Policy::offload(CompressorKind::Null, 2)), gpu, 4);
    let on_host = host.stats().kind(MemoryKind::Offloaded);
    assert!(on_host.peak > 0, "the saved inputs went to the host");
    assert_eq!(on_host.current, 0, "and were released after backward");
    assert_eq!(
        checkpointed.end_of_forward - offloaded.end_of_forward,
        on_host.peak,
        "the device holds the offloaded bytes less at the end of forward"
    );
    assert!(offloaded.peak <= checkpointed.peak);
    // The boundary states go too: offloaded, kept boundaries leave the device holding what
    // replayed ones (no boundary state) do, where checkpointed ones hold the states.
    let replayed = |p: fn(CompressorKind, usize) -> Policy| match p(CompressorKind::Null, 2) {
        Policy::Checkpoint {
            compressor, chunks, ..
        } => Policy::Checkpoint {
            compressor,
            chunks,
            boundaries: ChunkBoundaries::Replayed,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
        Policy::Offload {
            compressor, chunks, ..
        } => Policy::Offload {
            compressor,
            chunks,
            boundaries: ChunkBoundaries::Replayed,
            batch_norm_inputs: memopt_checkpoint::BatchNormInputs::Recomputed,
        },
        other => other,
    };
    let offloaded_replayed = step(&build, &plan(replayed(Policy::offload)), gpu, 4);
    let checkpointed_replayed = step(&build, &plan(replayed(Policy::checkpoint)), gpu, 4);
    assert!(checkpointed.end_of_forward > checkpointed_replayed.end_of_forward);
    assert_eq!(offloaded.end_of_forward, offloaded_replayed.end_of_forward);
    // On the CPU target the host is the device: the payload stays in its figures.
    let cpu_target = step(
        &build,
        &plan(Policy::offload(CompressorKind::Null, 2)),
        Device::META,
        4,
    );
    assert_eq!(cpu_target.end_of_forward, checkpointed.end_of_forward);
}
