//! Measuring each distinct segment once, and pricing a segment on the modules it covers,
//! give the chain model measuring and pricing every segment on its own gives.

use super::*;
use crate::measure::measure;
use crate::pricing::extra_ms;
use crate::segment_key::SegmentKeys;
use crate::sites::discover;
use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_core::{DType, MemoryKind, MemoryTracker, Tensor};
use memopt_profiler::Workload;
use memopt_profiler::cost::Throughput;
use std::sync::Arc;

/// A custom chain of repeated conv-LIF layers, a LIF with another time constant (same
/// shapes, another configuration), residual blocks with and without a shortcut, and a head.
const REPEATED: &str = r#"{
  "name": "repeated",
  "input": { "time_steps": 2, "sample": [2, 8, 8], "classes": 10, "spikes": true },
  "layers": [
    { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "lif" },
    { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "lif" },
    { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "lif" },
    { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "lif", "tau": 3.0 },
    { "type": "residual",
      "body": [ { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "batch_norm" },
                { "type": "lif" } ],
      "after": [ { "type": "lif" } ] },
    { "type": "residual",
      "body": [ { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "batch_norm" },
                { "type": "lif" } ],
      "after": [ { "type": "lif" } ] },
    { "type": "residual",
      "body": [ { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 }, { "type": "batch_norm" },
                { "type": "lif" } ],
      "shortcut": [ { "type": "conv2d", "out": 4, "kernel": 1 } ] },
    { "type": "max_pool", "kernel": 2 },
    { "type": "flatten" },
    { "type": "dropout", "p": 0.1 },
    { "type": "linear", "out": 10 }
  ]
}"#;

fn custom(json: &str, n: usize) -> Workload {
    let model = Arc::new(CustomModel::from_json(json).unwrap());
    let spec = model.spec().clone();
    let name = model.name().to_string();
    Workload::custom(&name, move |device, seed| model.build(&spec, device, seed), n)
}

/// A chain of `pairs` linear-LIF pairs, then the classifier.
fn linear_chain(pairs: usize) -> String {
    let body = vec![r#"{"type":"linear","out":16},{"type":"lif"}"#; pairs].join(",");
    format!(
        r#"{{"name":"chain","input":{{"time_steps":2,"sample":[16],"classes":10}},"layers":[{body},{{"type":"linear","out":10}}]}}"#
    )
}

fn workloads() -> Vec<Workload> {
    let mut out: Vec<Workload> = ["toy-if", "cifar10dvs-vgg", "sew-resnet18", "spiking-mlp"]
        .iter()
        .map(|name| Workload::zoo_small(name, 2).unwrap())
        .collect();
    out.push(custom(REPEATED, 2));
    out.push(custom(&linear_chain(20), 2));
    out
}

/// The model, its sites and its cost model, built as a planning session does.
fn setup(workload: &Workload) -> (Model, Site, CostModel) {
    let model = workload.build_model(workload.meta_device()).unwrap();
    let input = Tensor::zeros(
        model.spec().input_dims(workload.batch_size),
        DType::F32,
        workload.meta_device(),
        MemoryKind::Input,
    )
    .unwrap()
    .with_spike_flag(model.spike_input());
    let root = discover(&model, &input).unwrap();
    let cost = CostModel::from_workload(workload, Throughput::cpu_default()).unwrap();
    (model, root, cost)
}

/// Every site: each one, and every run of children the builder measures.
fn every_site(root: &Site, space: &OptionSpace) -> Vec<Site> {
    let mut out = Vec::new();
    for site in root.walk() {
        out.push(site.clone());
        // The runs the chain model builds from pieces, runs into the next child's pooling
        // among them.
        out.extend(
            part_runs(site, &pieces(site, space), space)
                .into_iter()
                .map(|r| r.site),
        );
        if site.runs_allowed {
            let n = site.chain().len();
            for start in 0..n {
                for end in start + 2..=n.min(start + space.max_run) {
                    out.push(site.run_of(start, end));
                }
            }
        }
    }
    out
}

#[test]
fn sharing_measurements_of_equal_segments_changes_no_figure() {
    for workload in workloads() {
        let _own = MemoryTracker::install(MemoryTracker::new(workload.meta_device()));
        let (model, root, cost) = setup(&workload);
        let space = OptionSpace::default();
        let mut shared = Measurements::new(&model, space.update_in_backward);
        let mut each = Measurements::measuring_each(&model, space.update_in_backward);
        let a = build(&model, &root, 2, 0, &space, &cost, &mut shared).unwrap();
        let b = build(&model, &root, 2, 0, &space, &cost, &mut each).unwrap();
        assert_eq!(a, b, "{}", workload.name());
        assert_eq!(each.reused, 0);
        if workload.name() == "repeated" {
            assert!(shared.reused > 0, "nothing shared in {}", workload.name());
        }
        if workload.name() == "chain" {
            // 41 layers and their runs, several policies each, and the whole: measured here,
            // 75 distinct segments for 696 measurements.
            assert!(
                shared.reused > 5 * shared.measured,
                "{}: {} measured, {} shared",
                workload.name(),
                shared.measured,
                shared.reused
            );
        }
    }
}

#[test]
fn segments_that_differ_in_configuration_or_input_do_not_share() {
    let workload = custom(REPEATED, 2);
    let _own = MemoryTracker::install(MemoryTracker::new(workload.meta_device()));
    let (model, root, _) = setup(&workload);
    let mut keys = SegmentKeys::new(&model);
    let key = |keys: &mut SegmentKeys<'_>, i: usize, first: bool| {
        keys.of(&root.parts[i], Policy::CHECKPOINT, first).unwrap()
    };
    // conv-LIF layers 2..5 see the same shapes; LIF 7 has another time constant.
    assert_eq!(key(&mut keys, 3, false), key(&mut keys, 5, false));
    assert_eq!(key(&mut keys, 2, false), key(&mut keys, 4, false));
    assert_ne!(key(&mut keys, 5, false), key(&mut keys, 7, false));
    // The first conv takes the batch (2 channels): another input, and first.
    assert_ne!(key(&mut keys, 0, true), key(&mut keys, 2, false));
    assert_ne!(key(&mut keys, 2, true), key(&mut keys, 2, false));
    // Residual blocks: the two without a shortcut are equal, the one with differs.
    assert_eq!(key(&mut keys, 8, false), key(&mut keys, 9, false));
    assert_ne!(key(&mut keys, 9, false), key(&mut keys, 10, false));
    // Another policy is another key; a run is not its first child.
    assert_ne!(
        keys.of(&root.parts[3], Policy::Store, false),
        Some(key(&mut keys, 3, false))
    );
    assert_ne!(
        keys.of(&root.run_of(2, 4), Policy::CHECKPOINT, false),
        Some(key(&mut keys, 2, false))
    );
    assert_eq!(
        keys.of(&root.run_of(2, 4), Policy::CHECKPOINT, false),
        keys.of(&root.run_of(4, 6), Policy::CHECKPOINT, false)
    );
    // And the figures agree where keys do.
    let f = |i: usize| measure(&model, &root.parts[i], Policy::CHECKPOINT, false, true).unwrap();
    assert_eq!(f(3), f(5));
}

#[test]
fn pricing_on_the_covered_modules_is_the_full_models() {
    let policies = [
        Policy::Store,
        Policy::CHECKPOINT,
        Policy::checkpoint(memopt_compress::CompressorKind::BitSpike, 2),
    ];
    for workload in workloads() {
        let _own = MemoryTracker::install(MemoryTracker::new(workload.meta_device()));
        let (_, root, cost) = setup(&workload);
        let pricing = SegmentPricing::new(&cost);
        for site in every_site(&root, &OptionSpace::default()) {
            let covered = pricing.for_site(&site);
            for p in policies {
                let full = extra_ms(&cost, &site, p);
                let own = extra_ms(&covered, &site, p);
                assert_eq!(
                    own.to_bits(),
                    full.to_bits(),
                    "{} {} {p:?}: {own} vs {full}",
                    workload.name(),
                    site.target()
                );
            }
        }
    }
}

#[test]
fn measuring_on_threads_gives_the_same_figures_and_asks_nothing_twice() {
    for workload in workloads() {
        let _own = MemoryTracker::install(MemoryTracker::new(workload.meta_device()));
        let (model, root, cost) = setup(&workload);
        let space = super::offered(&OptionSpace::default(), model.device());
        let mut serial = Measurements::new(&model, space.update_in_backward);
        let one = build(&model, &root, 2, 0, &space, &cost, &mut serial).unwrap();
        for threads in [1, 2, 3] {
            let mut ahead = Measurements::new(&model, space.update_in_backward);
            let mut wanted = Vec::new();
            requests(&root, true, &model, &space, &mut wanted);
            ahead.prefetch(&workload, wanted, threads).unwrap();
            let measured_ahead = ahead.measured;
            let many = build(&model, &root, 2, 0, &space, &cost, &mut ahead).unwrap();
            assert_eq!(one, many, "{} on {threads} threads", workload.name());
            // The requests are every measurement the chain model asks for: none is left to
            // measure on demand, each distinct segment is measured once, and the figures are
            // shared exactly as measuring in order shares them.
            assert_eq!(ahead.on_demand, 0, "{} on {threads} threads", workload.name());
            assert_eq!(measured_ahead, serial.measured, "{}", workload.name());
            assert_eq!(ahead.measured, serial.measured, "{}", workload.name());
            assert_eq!(ahead.reused, serial.reused, "{}", workload.name());
        }
        let public = chain_model_on_threads(&workload, &model, &root, 2, 0, &space, &cost, 2).unwrap();
        assert_eq!(one, public, "{}", workload.name());
    }
}

/// Each listed chunk count brings the fewest chunks with its longest chunk: at T = 10, 8
/// chunks (longest 2 steps) bring 5; counts above T stand for T (one step per chunk); T = 4,
/// 8, 16 add nothing.
#[test]
fn chunk_candidates_add_the_fewest_chunks_of_each_longest_chunk() {
    let listed = OptionSpace::default().chunk_counts;
    assert_eq!(listed, vec![2, 4, 8, 16]);
    assert_eq!(chunk_candidates(&listed, 10), vec![2, 4, 5, 8, 10]);
    assert_eq!(chunk_candidates(&listed, 6), vec![2, 3, 4, 6]);
    assert_eq!(chunk_candidates(&listed, 4), vec![2, 4]);
    assert_eq!(chunk_candidates(&listed, 16), vec![2, 4, 8, 16]);
    assert_eq!(chunk_candidates(&listed, 3), vec![2, 3]);
    assert_eq!(chunk_candidates(&listed, 1), Vec::<usize>::new());
    assert_eq!(chunk_candidates(&[1, 0, 7], 10), vec![5, 7]);
}
