//! The estimator's Meta step gives the measured CPU figures to the byte: the peak, its
//! breakdown, every module's figures and the whole timeline, for every zoo model, storing
//! everything and under random plans (sparse compression aside: data-dependent sizes), with
//! the caching allocator's fixed or expandable segments drawn at random.

mod common;

use common::{SHAPE_ONLY, random_plan, without_device_and_time};
use memopt_checkpoint::{Plan, Policy, zoo};
use memopt_compress::CompressorKind;
use memopt_core::{AllocatorConfig, Device};
use memopt_profiler::{Estimator, OptimizerChoice, Workload, profile_memory};
use proptest::prelude::*;
use std::time::Instant;

fn check_equal(workload: &Workload, plan: &Plan, estimator: &mut Estimator) -> Result<(), TestCaseError> {
    let measured = profile_memory(workload, plan, Device::Cpu).unwrap();
    let peak = estimator.peak_bytes(plan).unwrap();
    prop_assert_eq!(
        peak,
        measured.peak_bytes,
        "{}: plan {}",
        workload.describe(),
        plan.to_json()
    );
    let peaks = estimator.peaks(plan).unwrap();
    let m = measured.allocator;
    prop_assert_eq!(
        (peaks.requested_bytes, peaks.allocated_bytes, peaks.reserved_bytes),
        (
            m.requested_peak_bytes,
            m.allocated_peak_bytes,
            m.reserved_peak_bytes
        ),
        "{}: requested, allocated and reserved peaks, plan {}",
        workload.describe(),
        plan.to_json()
    );
    prop_assert!(
        m.requested_peak_bytes <= m.allocated_peak_bytes && m.allocated_peak_bytes <= m.reserved_peak_bytes
    );
    let estimated = estimator.report(plan).unwrap();
    prop_assert_eq!(estimated.device, Device::META);
    prop_assert_eq!(
        without_device_and_time(&estimated),
        without_device_and_time(&measured),
        "{}: plan {}",
        workload.describe(),
        plan.to_json()
    );
    Ok(())
}

#[test]
fn estimator_equals_the_measured_cpu_step_for_every_zoo_model() {
    for entry in zoo::entries() {
        let workload = Workload::zoo(entry.name, entry.small.clone(), 2);
        let mut estimator = Estimator::new(&workload).unwrap();
        check_equal(&workload, &Plan::store_all(), &mut estimator).unwrap();
    }
}

#[test]
fn estimator_equals_the_measured_step_with_adam() {
    let workload = Workload::zoo_small("toy-if", 2)
        .unwrap()
        .with_optimizer(OptimizerChoice::adam());
    let mut estimator = Estimator::new(&workload).unwrap();
    let plan = Plan::from_entries([("0", Policy::CHECKPOINT), ("2.1", Policy::CHECKPOINT)]);
    check_equal(&workload, &plan, &mut estimator).unwrap();
}

/// Any model with a builder works, not only the zoo's.
#[test]
fn estimator_equals_the_measured_step_for_a_custom_model() {
    let spec = memopt_checkpoint::InputSpec {
        time_steps: 3,
        sample: vec![16],
        classes: 10,
    };
    let workload = Workload::custom(
        "custom-mlp",
        move |device, seed| zoo::build("spiking-mlp", &spec, device, seed),
        3,
    );
    assert_eq!(workload.describe(), "custom-mlp T=3 N=3 [16] sgd");
    let mut estimator = Estimator::new(&workload).unwrap();
    check_equal(
        &workload,
        &Plan::from_entries([("1", Policy::CHECKPOINT)]),
        &mut estimator,
    )
    .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn estimator_equals_measured_under_random_plans_on_small_models(
        model in prop::sample::select(vec!["spiking-mlp", "toy-if"]),
        picks in proptest::collection::vec(0u32..4096, 1..24),
        expandable in any::<bool>(),
    ) {
        let _config = allocator(expandable).install();
        let workload = Workload::zoo_small(model, 2).unwrap();
        let mut estimator = Estimator::new(&workload).unwrap();
        let probe = workload.build_model(Device::META).unwrap();
        let plan = random_plan(&probe, &picks, &SHAPE_ONLY);
        check_equal(&workload, &plan, &mut estimator)?;
    }
}

/// The allocator configuration a case draws.
fn allocator(expandable: bool) -> AllocatorConfig {
    AllocatorConfig {
        expandable_segments: expandable,
    }
}

/// A random valid plan for `workload`: the estimate equals the measured CPU step. The
/// allocator's segments are expandable when the first pick is odd.
fn random_plan_on(workload: &Workload, picks: &[u32]) -> Result<(), TestCaseError> {
    let _config = allocator(picks[0] % 2 == 1).install();
    let mut estimator = Estimator::new(workload).unwrap();
    let probe = workload.build_model(Device::META).unwrap();
    let plan = random_plan(&probe, picks, &SHAPE_ONLY);
    check_equal(workload, &plan, &mut estimator)
}

/// The image model `model` at its small size, N=2.
fn small_image_model(model: &str) -> Workload {
    Workload::zoo_small(model, 2).unwrap()
}

/// The CIFAR10-DVS VGG at its small T=4 (time chunks 1 to 4) and N=2 on 2x32x32 inputs
/// instead of 2x48x48: 2.25 times less compute for the same blocks and pools, with activations
/// still on both sides of the allocator's 1 MiB small/large-pool boundary (2-4 MiB whole,
/// 0.5-1 MiB per time step in the first blocks); storing everything at 48x48 is checked above.
fn dvs_vgg_32() -> Workload {
    let spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
    Workload::zoo(
        "cifar10dvs-vgg",
        memopt_checkpoint::InputSpec {
            sample: vec![2, 32, 32],
            ..spec
        },
        2,
    )
}

// Random plans on the image models: one test per model, four cases each, so that the test
// threads share them (they were drawn at random within one 16-case test).
proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]

    #[test]
    fn estimator_equals_measured_under_random_plans_on_cifar10dvs_vgg(
        picks in proptest::collection::vec(0u32..4096, 4..64),
    ) {
        random_plan_on(&dvs_vgg_32(), &picks)?;
    }

    #[test]
    fn estimator_equals_measured_under_random_plans_on_sew_resnet18(
        picks in proptest::collection::vec(0u32..4096, 4..64),
    ) {
        random_plan_on(&small_image_model("sew-resnet18"), &picks)?;
    }

    #[test]
    fn estimator_equals_measured_under_random_plans_on_spiking_resnet18(
        picks in proptest::collection::vec(0u32..4096, 4..64),
    ) {
        random_plan_on(&small_image_model("spiking-resnet18"), &picks)?;
    }

    #[test]
    fn estimator_equals_measured_under_random_plans_on_spiking_vgg11_bn(
        picks in proptest::collection::vec(0u32..4096, 4..64),
    ) {
        random_plan_on(&small_image_model("spiking-vgg11-bn"), &picks)?;
    }
}

/// Sparse payloads depend on the number of spikes; Meta allocates the worst case, so the
/// estimate bounds the measurement from above and the report says so.
#[test]
fn sparse_compression_is_flagged_and_bounded_from_above() {
    let workload = Workload::zoo_small("toy-if", 2).unwrap();
    let plan = Plan::from_entries([("0.2", Policy::checkpoint(CompressorKind::Sparse, 1))]);
    let measured = profile_memory(&workload, &plan, Device::Cpu).unwrap();
    let mut estimator = Estimator::new(&workload).unwrap();
    let estimated = estimator.report(&plan).unwrap();
    assert!(measured.data_dependent_sizes && estimated.data_dependent_sizes);
    assert!(estimated.peak_bytes >= measured.peak_bytes);
    let packed = |r: &memopt_profiler::MemoryReport| {
        r.module("0.2", memopt_core::Phase::Forward).unwrap().packed_bytes
    };
    assert!(
        packed(&estimated) > packed(&measured),
        "random spikes are sparser than the worst case"
    );
}

/// The estimator reuses its Meta session: repeated and interleaved plans give the same figures
/// as fresh estimators, and a rejected plan leaves it usable.
#[test]
fn estimator_sessions_are_reusable() {
    let workload = Workload::zoo_small("toy-if", 32).unwrap();
    let a = Plan::from_entries([("0", Policy::CHECKPOINT)]);
    let b = Plan::store_all();
    let mut reused = Estimator::new(&workload).unwrap();
    let seq: Vec<u64> = [&a, &b, &a, &b]
        .iter()
        .map(|p| reused.peak_bytes(p).unwrap())
        .collect();
    assert_eq!(seq[0], seq[2]);
    assert_eq!(seq[1], seq[3]);
    assert!(seq[0] < seq[1], "checkpointing the first block lowers the peak");
    assert_eq!(Estimator::new(&workload).unwrap().peak_bytes(&a).unwrap(), seq[0]);
    let bad = Plan::from_entries([("nope", Policy::CHECKPOINT)]);
    assert!(reused.peak_bytes(&bad).unwrap_err().to_string().contains("nope"));
    assert_eq!(reused.peak_bytes(&b).unwrap(), seq[1]);
    assert_eq!(reused.report(&a).unwrap().peak_bytes, seq[0]);
}

/// A planner's query must take milliseconds: the VGG at its published size (T=10, N=32) and
/// every zoo model at its default size, well under 100 ms per plan even in a debug build.
#[test]
fn estimation_is_fast_at_full_size() {
    for entry in zoo::entries() {
        let n = if entry.name == "cifar10dvs-vgg" { 32 } else { 2 };
        let workload = Workload::zoo(entry.name, entry.published.clone(), n);
        let mut estimator = Estimator::new(&workload).unwrap();
        estimator.peak_bytes(&Plan::store_all()).unwrap();
        let t0 = Instant::now();
        let runs = 5;
        for _ in 0..runs {
            estimator.peak_bytes(&Plan::store_all()).unwrap();
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3 / runs as f64;
        assert!(ms < 100.0, "{}: {ms:.2} ms per estimate", entry.name);
    }
}

/// A Meta batch carries no host data: a batch of 2^32 samples (whose inputs would take
/// hundreds of GiB) is built at once and only counted.
#[test]
fn meta_batches_touch_no_host_memory() {
    let model = Workload::zoo_small("toy-if", 1)
        .unwrap()
        .build_model(Device::META)
        .unwrap();
    let n = 1usize << 32;
    let started = Instant::now();
    let batch = memopt_profiler::random_batch(&model, n, 0).unwrap();
    assert!(started.elapsed().as_secs_f64() < 1.0);
    let input_elems: usize = model.spec().input_dims(n).iter().product();
    assert_eq!(batch.input.view_bytes(), input_elems as u64 * 4);
}
