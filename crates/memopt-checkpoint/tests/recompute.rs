//! Recomputation materialises only what backward needs, and buffers go as soon as their last
//! reader is done: a recomputed segment's last layer does not write an output that only seeds
//! the gradient (BatchNorm's normalised output, a neuron's spikes), a checkpointed segment's
//! input is freed by the segment's first layer, and a time-chunked segment assembles its input
//! gradient in the output gradient it has consumed, or, when none can hold it, keeps each
//! chunk's gradient apart until every chunk has run. Every case: gradients, statistics and
//! states bit-identical to storing everything, and Meta allocating what the CPU does.

mod common;

use common::{Recorded, Recorder, fingerprint};
use memopt_checkpoint::module::{BatchNorm, Conv2d, Flatten, Init, Linear, Neuron, Pool2d, Sequential};
use memopt_checkpoint::{InputSpec, Model, Plan, Policy, StepOptions, zoo};
use memopt_compress::CompressorKind;
use memopt_core::kernels::{Conv2dParams, NeuronConfig};
use memopt_core::memory::{MemoryAction, Phase};
use memopt_core::{Device, MemoryKind, MemoryTracker};
use std::sync::Arc;

/// The events of one training step of `model` (built on `device`) under `plan`.
fn events(build: &dyn Fn(Device) -> Model, plan: &Plan, device: Device, n: usize) -> Vec<Recorded> {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let mut model = build(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = common::trainer(&model);
    let batch = common::batch(&model, n, 0);
    let recorder = Arc::new(Recorder::default());
    let _sub = tracker.subscribe(recorder.clone());
    trainer.step(&model, &batch, StepOptions::default()).unwrap();
    recorder.0.lock().unwrap().clone()
}

/// Most bytes held after any event in `phase` at exactly `path`.
fn peak_at(events: &[Recorded], path: &str, phase: Phase) -> u64 {
    events
        .iter()
        .filter(|e| e.3 == path && e.4 == phase)
        .map(|e| e.5)
        .max()
        .unwrap_or_else(|| panic!("no event at {path} in {phase:?}"))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Last {
    BatchNorm,
    Neuron,
}

const T: usize = 4;
const N: usize = 2;
const C: usize = 6;

/// `seg` = [conv 2->C, BN (, LIF)] on `[T, N, 2, 8, 8]`, then a flatten and a linear head. With
/// `view_last` the flatten is `seg`'s last child instead, so that `seg`'s last layer (a view)
/// no longer gives the output of the BN or LIF: that output is then materialised in
/// recomputation, which is the only difference between the two models.
fn model(device: Device, last: Last, view_last: bool) -> Model {
    let mut init = Init::new(device, 3);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let mut seg = Sequential::new()
        .push(Conv2d::new(&mut init, 2, C, 3, pad1, true).unwrap())
        .push(BatchNorm::new_2d(&mut init, C).unwrap());
    if last == Last::Neuron {
        seg = seg.push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    }
    let mut root = Sequential::new();
    if view_last {
        root = root.push_named("seg", seg.push(Flatten::new(2)));
    } else {
        root = root.push_named("seg", seg).push_named("flat", Flatten::new(2));
    }
    root = root.push_named("fc", Linear::new(&mut init, C * 64, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, 8, 8],
        classes: 5,
    };
    Model::new("seg-test", Box::new(root), spec, device)
}

fn checkpoint(path: &str, chunks: usize) -> Plan {
    Plan::from_entries([(
        path.to_string(),
        Policy::checkpoint(CompressorKind::BitSpike, chunks),
    )])
}

#[test]
fn a_recomputed_segment_does_not_materialise_the_output_that_only_seeds_its_gradient() {
    let output_bytes = (T * N * C * 64 * 4) as u64;
    for (last, path) in [(Last::BatchNorm, "seg.1"), (Last::Neuron, "seg.2")] {
        // Unchunked, and in time chunks, where the BatchNorm's statistics and gradient sums
        // come from passes over the chunks and each chunk's output only seeds its gradient.
        for chunks in [1, 2, 4] {
            let plan = checkpoint("seg", chunks);
            let mut per_device = Vec::new();
            for device in [Device::Cpu, Device::META] {
                let lean = events(&|d| model(d, last, false), &plan, device, N);
                let full = events(&|d| model(d, last, true), &plan, device, N);
                // While the last layer recomputes, it holds exactly one chunk's output bytes
                // less.
                assert_eq!(
                    peak_at(&full, path, Phase::Recompute) - peak_at(&lean, path, Phase::Recompute),
                    output_bytes / chunks as u64,
                    "{last:?} on {device}, {chunks} chunks"
                );
                // In the forward pass (no recomputation) both models allocate alike.
                assert_eq!(
                    peak_at(&full, path, Phase::Forward),
                    peak_at(&lean, path, Phase::Forward)
                );
                let max = |ev: &[Recorded]| ev.iter().map(|e| e.5).max().unwrap();
                assert!(max(&lean) <= max(&full));
                per_device.push(lean);
            }
            let strip = |ev: &[Recorded]| -> Vec<_> {
                ev.iter().map(|e| (e.0, e.1, e.2, e.3.clone(), e.4)).collect()
            };
            assert_eq!(
                strip(&per_device[0]),
                strip(&per_device[1]),
                "Meta records the CPU's events ({chunks} chunks)"
            );
            // Bit-identical to storing everything (two steps: the running statistics of the
            // first feed the second).
            let build = |plan: &Plan| {
                let mut m = model(Device::Cpu, last, false);
                m.apply_plan(plan).unwrap();
                m
            };
            assert_eq!(
                fingerprint(&build(&plan), 2, N),
                fingerprint(&build(&Plan::store_all()), 2, N),
                "{last:?}, {chunks} chunks"
            );
        }
    }
}

#[test]
fn a_checkpointed_segment_frees_its_input_once_its_first_layer_has_read_it() {
    // Block 2 of the VGG starts with an average pool; its input, block 1's spikes, is kept
    // packed by the checkpoint, so the pool is the spikes' last reader.
    // At its small T=4 on 2x32x32 inputs instead of 2x48x48 (2.25 times less compute): the same
    // blocks, and block 1's spikes (4 MiB) still take a large-pool block of their own.
    let spec = InputSpec {
        sample: vec![2, 32, 32],
        ..zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    let vgg = |d| zoo::build("cifar10dvs-vgg", &spec, d, 0).unwrap();
    let [h, w] = [spec.sample[1], spec.sample[2]];
    let spikes = (spec.time_steps * N * 128 * h * w * 4) as u64;
    let plan = checkpoint("features.2", 1);
    let mut per_device = Vec::new();
    for device in [Device::Cpu, Device::META] {
        let ev = events(&vgg, &plan, device, N);
        let freed_by_pool = ev.iter().any(|e| {
            e.0 == MemoryAction::Free
                && e.1 == spikes
                && e.3 == "features.2.proj_bn.0"
                && e.4 == Phase::Forward
        });
        assert!(
            freed_by_pool,
            "{device}: block 1's spikes are freed by block 2's pool"
        );
        per_device.push(ev);
    }
    // Times aside, the CPU and Meta streams are equal, held bytes included.
    assert_eq!(per_device[0], per_device[1]);
    let build = |plan: &Plan| {
        let mut m = vgg(Device::Cpu);
        m.apply_plan(plan).unwrap();
        m
    };
    assert_eq!(
        fingerprint(&build(&plan), 1, N),
        fingerprint(&build(&Plan::store_all()), 1, N)
    );
}

/// A linear layer, [Linear, IF, Linear, IF] of width 32 as `blk` (whose input then needs a
/// gradient), and a linear head, on `[T, N, 32]`.
fn mlp(device: Device) -> Model {
    let mut init = Init::new(device, 5);
    let pre = Linear::new(&mut init, 32, 32, true).unwrap();
    let blk = Sequential::new()
        .push(Linear::new(&mut init, 32, 32, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::if_neuron(), 2.0).unwrap())
        .push(Linear::new(&mut init, 32, 32, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::if_neuron(), 2.0).unwrap());
    let root = Sequential::new()
        .push_named("pre", pre)
        .push_named("blk", blk)
        .push_named("fc", Linear::new(&mut init, 32, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![32],
        classes: 5,
    };
    Model::new("mlp-test", Box::new(root), spec, device)
}

/// Checkpointing `blk` of `build`'s model in 2 and 4 time chunks allocates no full-length
/// gradient of `full` bytes at `blk` (its input gradient lives in the output gradient it
/// consumed), on the CPU and on Meta alike, and every step is bit-identical to storing
/// everything.
fn assert_input_gradient_hosted(build: fn(Device) -> Model, full: u64) {
    let mut per_device = Vec::new();
    for device in [Device::Cpu, Device::META] {
        for chunks in [2, 4] {
            let ev = events(&build, &checkpoint("blk", chunks), device, N);
            let full_grads = ev.iter().filter(|e| {
                e.0 == MemoryAction::Alloc && e.1 == full && e.2 == MemoryKind::Gradient && e.3 == "blk"
            });
            assert_eq!(
                full_grads.count(),
                0,
                "{device}, {chunks} chunks: no second full-length gradient"
            );
            per_device.push(
                ev.into_iter()
                    .map(|e| (e.0, e.1, e.2, e.3, e.4))
                    .collect::<Vec<_>>(),
            );
        }
    }
    assert_eq!(per_device[..2], per_device[2..], "Meta records the CPU's events");
    assert_blk_chunks_exact(build);
}

/// Two steps with `blk` checkpointed in 1, 2 and 4 time chunks are bit-identical to storing
/// everything, for the model `build` makes.
fn assert_blk_chunks_exact(build: fn(Device) -> Model) {
    let planned = |plan: &Plan| {
        let mut m = build(Device::Cpu);
        m.apply_plan(plan).unwrap();
        m
    };
    let stored = fingerprint(&planned(&Plan::store_all()), 2, N);
    for chunks in [1, 2, 4] {
        assert_eq!(
            fingerprint(&planned(&checkpoint("blk", chunks)), 2, N),
            stored,
            "{chunks} chunks"
        );
    }
}

#[test]
fn a_chunked_segment_assembles_its_input_gradient_in_the_output_gradient_it_consumed() {
    assert_input_gradient_hosted(mlp, (T * N * 32 * 4) as u64);
}

/// `pre` = [conv 2->2, LIF] on `[T, N, 2, 4, 4]`, `blk` = [conv 2->8 stride 2, LIF] giving
/// `[T, N, 8, 2, 2]` (as many elements per time step as its input, in another shape, as a
/// VGG block with pooling), a flatten and a linear head.
fn reshaping(device: Device) -> Model {
    let mut init = Init::new(device, 7);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let down = Conv2dParams {
        stride: [2, 2],
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let pre = Sequential::new()
        .push(Conv2d::new(&mut init, 2, 2, 3, pad1, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    let blk = Sequential::new()
        .push(Conv2d::new(&mut init, 2, 8, 3, down, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    let root = Sequential::new()
        .push_named("pre", pre)
        .push_named("blk", blk)
        .push_named("flat", Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, 32, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, 4, 4],
        classes: 5,
    };
    Model::new("reshaping-test", Box::new(root), spec, device)
}

#[test]
fn a_chunked_segment_hosts_its_input_gradient_in_an_output_gradient_of_another_shape() {
    // blk's input [T, N, 2, 4, 4] and output [T, N, 8, 2, 2] hold 32 f32 per sample and step.
    assert_input_gradient_hosted(reshaping, (T * N * 32 * 4) as u64);
}

/// `pre` = [conv 2->C, LIF] on `[T, N, 2, 8, 8]`, `blk` = [conv C->C, BN, LIF, average pool
/// 2x2] giving a quarter of its input's elements per time step (a VGG block with the next
/// block's pool), a flatten and a linear head.
fn pooling(device: Device) -> Model {
    let mut init = Init::new(device, 11);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let pre = Sequential::new()
        .push(Conv2d::new(&mut init, 2, C, 3, pad1, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    let blk = Sequential::new()
        .push(Conv2d::new(&mut init, C, C, 3, pad1, true).unwrap())
        .push(BatchNorm::new_2d(&mut init, C).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap())
        .push(Pool2d::avg(2, 2, 0));
    let root = Sequential::new()
        .push_named("pre", pre)
        .push_named("blk", blk)
        .push_named("flat", Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, C * 16, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, 8, 8],
        classes: 5,
    };
    Model::new("pooling-test", Box::new(root), spec, device)
}

#[test]
fn a_chunked_segment_whose_output_gradient_cannot_hold_its_input_gradient_assembles_it_last() {
    // blk's input gradient [T, N, C, 8, 8] is four times its output gradient: no chunk can
    // write it there. It is put together once, after the last chunk's recomputation, so no
    // chunk's backward holds it in full beside the states and saved inputs of the chunks
    // still to run.
    let full = (T * N * C * 64 * 4) as u64;
    let mut per_device = Vec::new();
    for device in [Device::Cpu, Device::META] {
        for chunks in [2, 4] {
            let ev = events(&pooling, &checkpoint("blk", chunks), device, N);
            let full_grads: Vec<usize> = (0..ev.len())
                .filter(|&i| {
                    let e = &ev[i];
                    e.0 == MemoryAction::Alloc && e.1 == full && e.2 == MemoryKind::Gradient && e.3 == "blk"
                })
                .collect();
            let last_recompute = (0..ev.len())
                .filter(|&i| ev[i].4 == Phase::Recompute && ev[i].3.starts_with("blk"))
                .max()
                .unwrap();
            assert_eq!(
                full_grads.len(),
                1,
                "{device}, {chunks} chunks: one full-length input gradient"
            );
            assert!(
                full_grads[0] > last_recompute,
                "{device}, {chunks} chunks: allocated after the last chunk ran"
            );
            per_device.push(
                ev.into_iter()
                    .map(|e| (e.0, e.1, e.2, e.3, e.4, e.5))
                    .collect::<Vec<_>>(),
            );
        }
    }
    assert_eq!(per_device[..2], per_device[2..], "Meta records the CPU's events");
    assert_blk_chunks_exact(pooling);
}

/// `pre` = [conv 2->C, LIF] gives spikes; `seg` = [conv C->C] reads them. Checkpointed with
/// BitSpike, `seg` restores its input bit-packed and its convolution reads it one time step at
/// a time. With `view_last` a flatten is `seg`'s last child, so the convolution's output is
/// materialised in recomputation; otherwise it only seeds the gradient and is not computed.
fn packed_model(device: Device, view_last: bool) -> Model {
    let mut init = Init::new(device, 5);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let pre = Sequential::new()
        .push(Conv2d::new(&mut init, 2, C, 3, pad1, true).unwrap())
        .push(Neuron::new(&mut init, NeuronConfig::lif(2.0), 2.0).unwrap());
    let seg = Sequential::new().push(Conv2d::new(&mut init, C, C, 3, pad1, false).unwrap());
    let mut root = Sequential::new().push_named("pre", pre);
    if view_last {
        root = root.push_named("seg", seg.push(Flatten::new(2)));
    } else {
        root = root.push_named("seg", seg).push_named("flat", Flatten::new(2));
    }
    root = root.push_named("fc", Linear::new(&mut init, C * 64, 5, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, 8, 8],
        classes: 5,
    };
    Model::new("packed-seg-test", Box::new(root), spec, device)
}

#[test]
fn a_recomputed_convolution_reading_packed_spikes_does_not_compute_an_unread_output() {
    let output_bytes = (T * N * C * 64 * 4) as u64;
    for chunks in [1, 2] {
        let plan = checkpoint("seg", chunks);
        let mut per_device = Vec::new();
        for device in [Device::Cpu, Device::META] {
            let lean = events(&|d| packed_model(d, false), &plan, device, N);
            let full = events(&|d| packed_model(d, true), &plan, device, N);
            // The materialised model allocates the convolution's output (one chunk of it) in
            // recomputation, the lean one neither it nor the stepwise kernel's workspace.
            let outputs = |ev: &[Recorded]| {
                ev.iter()
                    .filter(|e| {
                        (e.0, e.1, e.2, e.3.as_str(), e.4)
                            == (
                                MemoryAction::Alloc,
                                output_bytes / chunks as u64,
                                MemoryKind::Activation,
                                "seg.0",
                                Phase::Recompute,
                            )
                    })
                    .count()
            };
            assert_eq!(
                (outputs(&full), outputs(&lean)),
                (chunks, 0),
                "{chunks} chunks on {device}"
            );
            assert!(
                peak_at(&full, "seg.0", Phase::Recompute) - peak_at(&lean, "seg.0", Phase::Recompute)
                    > output_bytes / chunks as u64,
                "{chunks} chunks on {device}"
            );
            per_device.push(lean);
        }
        let strip =
            |ev: &[Recorded]| -> Vec<_> { ev.iter().map(|e| (e.0, e.1, e.2, e.3.clone(), e.4)).collect() };
        assert_eq!(
            strip(&per_device[0]),
            strip(&per_device[1]),
            "Meta records the CPU's events ({chunks} chunks)"
        );
        let build = |plan: &Plan| {
            let mut m = packed_model(Device::Cpu, false);
            m.apply_plan(plan).unwrap();
            m
        };
        assert_eq!(
            fingerprint(&build(&plan), 2, N),
            fingerprint(&build(&Plan::store_all()), 2, N),
            "{chunks} chunks"
        );
    }
}
