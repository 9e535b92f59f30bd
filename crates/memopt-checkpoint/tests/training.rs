//! Training on synthetic data reduces the loss; dropout inside a checkpointed segment replays
//! its mask in recomputation.

mod common;

use common::{batch, fingerprint, trainer, zoo_small};
use memopt_checkpoint::module::{Dropout, Init, Linear, Neuron, Sequential};
use memopt_checkpoint::optim::Adam;
use memopt_checkpoint::{InputSpec, Model, Plan, Policy, StepOptions, Trainer};
use memopt_compress::CompressorKind;
use memopt_core::Device;
use memopt_core::kernels::AdamConfig;

fn losses(model: &Model, steps: usize, n: usize) -> Vec<f32> {
    let mut t = trainer(model);
    let b = batch(model, n, 3);
    (0..steps)
        .map(|_| t.step(model, &b, StepOptions::default()).unwrap().loss.unwrap())
        .collect()
}

#[test]
fn the_small_mlp_learns() {
    let model = zoo_small("spiking-mlp", Device::Cpu, 0);
    let cfg = AdamConfig {
        lr: 0.02,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let mut t = Trainer::new(Box::new(Adam::new(&model, cfg).unwrap()), 0);
    let b = batch(&model, 8, 3);
    let l: Vec<f32> = (0..40)
        .map(|_| t.step(&model, &b, StepOptions::default()).unwrap().loss.unwrap())
        .collect();
    assert!(l[39] < 0.5 * l[0], "loss {} -> {}", l[0], l[39]);
}

#[test]
fn the_vgg_learns_with_every_block_checkpointed() {
    // At its small T=4 on 2x32x32 inputs instead of 2x48x48 (2.25 times less compute): the
    // same eight blocks, each checkpointed.
    let spec = InputSpec {
        sample: vec![2, 32, 32],
        ..memopt_checkpoint::zoo::entry("cifar10dvs-vgg").unwrap().small
    };
    let mut model = memopt_checkpoint::zoo::build("cifar10dvs-vgg", &spec, Device::Cpu, 0).unwrap();
    model
        .apply_plan(&Plan::from_entries(
            (0..8).map(|i| (format!("features.{i}"), Policy::CHECKPOINT)),
        ))
        .unwrap();
    let l = losses(&model, 4, 2);
    assert!(l[3] < l[0], "loss {:?}", l);
}

fn dropout_net(device: Device) -> Model {
    let mut init = Init::new(device, 4);
    let block = Sequential::new()
        .push_named("fc", Linear::new(&mut init, 12, 12, true).unwrap())
        .push_named("drop", Dropout::new(0.5))
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap());
    let root = Sequential::new()
        .push_named("block", block)
        .push_named("out", Linear::new(&mut init, 12, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: 4,
        sample: vec![12],
        classes: 3,
    };
    Model::new("dropout-net", Box::new(root), spec, device)
}

#[test]
fn dropout_replays_its_mask_in_recomputation() {
    let base = fingerprint(&dropout_net(Device::Cpu), 3, 4);
    for chunks in [1, 2, 4] {
        let mut model = dropout_net(Device::Cpu);
        let p = Policy::checkpoint(CompressorKind::Null, chunks);
        model.apply_plan(&Plan::from_entries([("block", p)])).unwrap();
        assert_eq!(fingerprint(&model, 3, 4), base, "chunks = {chunks}");
    }
    // A different dropout stream gives different gradients: the test can see a wrong mask.
    let model = dropout_net(Device::Cpu);
    let mut other = common::trainer(&model);
    let _ = other
        .step(&model, &batch(&model, 4, 99), StepOptions::default())
        .unwrap();
    assert_ne!(fingerprint(&model, 3, 4), base);
}
