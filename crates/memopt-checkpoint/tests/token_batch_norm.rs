//! BatchNorm1d over tokens (`[T, N, C, L]`, as the spiking transformers normalise): the same
//! bits as BatchNorm2d over `[T, N, C, 1, L]`, and plans that run it in time chunks (its
//! whole-batch statistics in passes) bit-identical to storing everything, with Meta's peaks
//! equal to the CPU's.

mod common;

use common::{assert_exact_and_meta_matches_cpu, fingerprint, plan_of};
use memopt_checkpoint::module::{BatchNorm, Flatten, Init, Linear, Neuron, Sequential};
use memopt_checkpoint::{InputSpec, Model, Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::Device;

const CHANNELS: usize = 4;
const TOKENS: usize = 6;

/// Linear over features - BatchNorm - LIF - Flatten - Linear, on `sample` inputs; the
/// BatchNorm is `norm` for that sample's layout.
fn model_with(device: Device, sample: Vec<usize>, norm: fn(&mut Init) -> BatchNorm) -> Model {
    let mut init = Init::new(device, 3);
    let last = *sample.last().unwrap();
    let root = Sequential::new()
        .push_named("fc1", Linear::new(&mut init, last, last, true).unwrap())
        .push_named("bn", norm(&mut init))
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap())
        .push_named("flat", Flatten::new(2))
        .push_named("fc2", Linear::new(&mut init, CHANNELS * TOKENS, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: 4,
        sample,
        classes: 3,
    };
    Model::new("tokens", Box::new(root), spec, device)
}

fn tokens(device: Device) -> Model {
    model_with(device, vec![CHANNELS, TOKENS], |init| {
        BatchNorm::new_1d_tokens(init, CHANNELS).unwrap()
    })
}

fn planes(device: Device) -> Model {
    model_with(device, vec![CHANNELS, 1, TOKENS], |init| {
        BatchNorm::new_2d(init, CHANNELS).unwrap()
    })
}

#[test]
fn token_batch_norm_has_the_bits_of_a_one_row_batch_norm_2d() {
    let (t, p) = (tokens(Device::Cpu), planes(Device::Cpu));
    let (ft, fp) = (fingerprint(&t, 2, 3), fingerprint(&p, 2, 3));
    assert_eq!(ft.loss, fp.loss);
    assert_eq!(ft.grads, fp.grads);
    assert_eq!(ft.params_after, fp.params_after);
    assert_eq!(ft.buffers, fp.buffers);
}

#[test]
fn plans_chunking_token_batch_norm_are_exact_and_meta_predicts_the_cpu() {
    let run = |start, end, chunks| PlanEntry {
        path: String::new(),
        children: Some([start, end]),
        into_next: 0,
        policy: Policy::checkpoint(CompressorKind::BitSpike, chunks),
    };
    for plan in [
        Plan::from_entries([("bn", Policy::CHECKPOINT)]),
        plan_of(vec![run(0, 3, 2)]),
        plan_of(vec![run(1, 3, 4)]),
    ] {
        assert_exact_and_meta_matches_cpu(tokens, &plan, 3);
    }
}
