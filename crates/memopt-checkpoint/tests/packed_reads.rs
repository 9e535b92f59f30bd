//! A checkpointed segment whose first layer is a convolution or a linear layer reads its
//! bit-packed saved input one time step at a time: the whole f32 input never exists during the
//! recomputation, so the segment's backward peak is lower by exactly the input's f32 bytes minus
//! its payload and one time step's buffer, on the CPU and on Meta alike, and every gradient,
//! statistic and state stays bit-identical to storing everything.

mod common;

use common::{batch, fingerprint, trainer};
use memopt_checkpoint::Forward;
use memopt_checkpoint::module::{
    Conv2d, Flatten, Init, Linear, Module, Neuron, PlannerHints, Pool2d, Sequential,
};
use memopt_checkpoint::{Cx, InputSpec, Model, Plan, PlanEntry, Policy, Result, StepOptions, Var};
use memopt_core::kernels::Conv2dParams;
use memopt_core::memory::{MemoryEvent, MemorySubscriber, Phase};
use memopt_core::{Device, MemoryKind, MemoryTracker};
use std::sync::{Arc, Mutex};

/// Unpacks its input once (as the recomputation did before packed reads): put in front of a
/// layer inside a checkpointed run, it makes the run restore its input as f32.
struct Unpack;

impl Module for Unpack {
    fn type_name(&self) -> &'static str {
        "Unpack"
    }

    fn forward<'m>(&'m self, _cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        Ok(inputs.iter().map(Var::unpacked).collect::<Result<_>>()?)
    }
}

impl PlannerHints for Unpack {}

const T: usize = 4;
const N: usize = 2;
/// Channels and size of the block's input spikes.
const C: usize = 6;
const HW: usize = 10;

/// conv0-LIF, then `block` = [unpack, conv (C -> 8), LIF], pooling and a classifier. The block's
/// conv reads the LIF's spikes `[T, N, C, HW, HW]`.
fn model(device: Device) -> Model {
    let mut init = Init::new(device, 3);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let block = Sequential::new()
        .push_named("unpack", Unpack)
        .push_named("conv", Conv2d::new(&mut init, C, 8, 3, pad1, true).unwrap())
        .push_named("sn", Neuron::lif(&mut init, 2.0).unwrap());
    let root = Sequential::new()
        .push_named("conv0", Conv2d::new(&mut init, 2, C, 3, pad1, false).unwrap())
        .push_named("sn0", Neuron::lif(&mut init, 2.0).unwrap())
        .push_named("block", block)
        .push_named("pool", Pool2d::avg(5, 5, 0))
        .push_named("flatten", Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, 8 * 2 * 2, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, HW, HW],
        classes: 3,
    };
    Model::new("packed-reads", Box::new(root), spec, device)
}

/// The peak of the bytes held while `block`'s segment recomputes and backpropagates.
#[derive(Default)]
struct BlockBackwardPeak(Mutex<u64>);

impl MemorySubscriber for BlockBackwardPeak {
    fn on_event(&self, e: &MemoryEvent) {
        let inside = e.scope.module_path().is_under("block");
        if inside && matches!(e.scope.phase(), Phase::Recompute | Phase::Backward) {
            let mut p = self.0.lock().unwrap();
            *p = (*p).max(e.current_bytes);
        }
    }
}

/// (the block's backward peak, the step's peak, the packed peak) of one step under `plan`.
fn peaks(plan: &Plan, device: Device) -> (u64, u64, u64) {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let probe = Arc::new(BlockBackwardPeak::default());
    let _sub = tracker.subscribe(probe.clone());
    let mut model = model(device);
    model.apply_plan(plan).unwrap();
    let mut trainer = trainer(&model);
    trainer
        .step(&model, &batch(&model, N, 0), StepOptions::default())
        .unwrap();
    let block = *probe.0.lock().unwrap();
    (
        block,
        tracker.peak_bytes(),
        tracker.stats().kind(MemoryKind::Packed).peak,
    )
}

/// `block`'s children `run` checkpointed with bit-packed inputs.
fn checkpoint_run(run: [usize; 2]) -> Plan {
    Plan {
        update_in_backward: false,
        entries: vec![PlanEntry {
            path: "block".into(),
            children: Some(run),
            into_next: 0,
            policy: Policy::CHECKPOINT,
        }],
        ..Plan::store_all()
    }
}

#[test]
fn a_checkpointed_conv_reads_its_packed_input_per_time_step_and_its_peak_falls_by_exactly_that() {
    // [unpack, conv]: the run restores its input, `unpack` makes it f32, the conv reads that.
    // [conv]: the conv reads the restored bits one time step at a time.
    let unpacked = checkpoint_run([0, 2]);
    let packed = Plan::from_entries([("block.conv", Policy::CHECKPOINT)]);
    let (cpu_unpacked, cpu_packed) = (peaks(&unpacked, Device::Cpu), peaks(&packed, Device::Cpu));
    assert_eq!(
        cpu_unpacked,
        peaks(&unpacked, Device::META),
        "Meta predicts the CPU"
    );
    assert_eq!(cpu_packed, peaks(&packed, Device::META), "Meta predicts the CPU");
    let values = (T * N * C * HW * HW) as u64;
    let (f32_bytes, payload, step) = (4 * values, values.div_ceil(8), 4 * values / T as u64);
    // Both keep the same payload until backward.
    assert_eq!(cpu_unpacked.2, payload);
    assert_eq!(cpu_packed.2, payload);
    // While the block recomputes and backpropagates, the f32 input gives way to its payload and
    // one time step of it.
    assert_eq!(
        cpu_unpacked.0 - cpu_packed.0,
        f32_bytes - payload - step,
        "block backward peaks: restored as f32 {}, read packed {}",
        cpu_unpacked.0,
        cpu_packed.0
    );
}

#[test]
fn packed_reads_leave_every_result_bit_identical_to_storing_everything() {
    let store = fingerprint(&model(Device::Cpu), 2, N);
    for plan in [
        Plan::from_entries([("block.conv", Policy::CHECKPOINT)]),
        Plan::from_entries([("block", Policy::CHECKPOINT)]),
        checkpoint_run([1, 3]),
        Plan::from_entries([(
            "block",
            Policy::checkpoint(memopt_compress::CompressorKind::BitSpike, 3),
        )]),
        Plan::from_entries([(
            "block",
            Policy::offload(memopt_compress::CompressorKind::BitSpike, 1),
        )]),
        // Nested: the outer recomputation hands the inner segment its packed input.
        Plan::from_entries([("block", Policy::CHECKPOINT), ("block.conv", Policy::CHECKPOINT)]),
    ] {
        let mut m = model(Device::Cpu);
        m.apply_plan(&plan).unwrap();
        assert_eq!(fingerprint(&m, 2, N), store, "{plan:?}");
    }
}

/// `sn(conv(x)) + x` (a SEW-style residual block); with `unpack_identity`, `x` is unpacked
/// whole before the addition (what the addition did before it read packed operands).
struct Residual {
    unpack_identity: bool,
    conv: Conv2d,
    sn: Neuron,
}

impl Module for Residual {
    fn type_name(&self) -> &'static str {
        "Residual"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = inputs.into_iter().next().unwrap();
        let y = cx.call1("conv", &self.conv, x.clone())?;
        let y = cx.call1("sn", &self.sn, y)?;
        let identity = if self.unpack_identity { x.unpacked()? } else { x };
        Ok(vec![memopt_checkpoint::ops::add(cx, &y, &identity)?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("conv".into(), &self.conv), ("sn".into(), &self.sn)]
    }
}

impl PlannerHints for Residual {}

fn residual_model(device: Device, unpack_identity: bool) -> Model {
    let mut init = Init::new(device, 5);
    let pad1 = Conv2dParams {
        padding: [1, 1],
        ..Conv2dParams::default()
    };
    let block = Residual {
        unpack_identity,
        conv: Conv2d::new(&mut init, C, C, 3, pad1, false).unwrap(),
        sn: Neuron::lif(&mut init, 2.0).unwrap(),
    };
    let root = Sequential::new()
        .push_named("conv0", Conv2d::new(&mut init, 2, C, 3, pad1, false).unwrap())
        .push_named("sn0", Neuron::lif(&mut init, 2.0).unwrap())
        .push_named("block", block)
        .push_named("pool", Pool2d::avg(5, 5, 0))
        .push_named("flatten", Flatten::new(2))
        .push_named("fc", Linear::new(&mut init, C * 2 * 2, 3, true).unwrap());
    let spec = InputSpec {
        time_steps: T,
        sample: vec![2, HW, HW],
        classes: 3,
    };
    Model::new("packed-residual", Box::new(root), spec, device)
}

/// The peak of the bytes held by events of the block's own scope while it recomputes: its
/// addition (the convolution and the neuron run in their own scopes).
#[derive(Default)]
struct AdditionPeak(Mutex<u64>);

impl MemorySubscriber for AdditionPeak {
    fn on_event(&self, e: &MemoryEvent) {
        if e.scope.path() == "block" && e.scope.phase() == Phase::Recompute {
            let mut p = self.0.lock().unwrap();
            *p = (*p).max(e.current_bytes);
        }
    }
}

#[test]
fn a_packed_residual_identity_is_added_one_time_step_at_a_time_and_stays_exact() {
    let plan = Plan::from_entries([("block", Policy::CHECKPOINT)]);
    let run = |device: Device, unpack_identity: bool| {
        let tracker = MemoryTracker::new(device);
        let _installed = MemoryTracker::install(tracker.clone());
        let probe = Arc::new(AdditionPeak::default());
        let _sub = tracker.subscribe(probe.clone());
        let mut m = residual_model(device, unpack_identity);
        m.apply_plan(&plan).unwrap();
        trainer(&m)
            .step(&m, &batch(&m, N, 0), StepOptions::default())
            .unwrap();
        *probe.0.lock().unwrap()
    };
    let (packed, unpacked) = (run(Device::Cpu, false), run(Device::Cpu, true));
    assert_eq!(packed, run(Device::META, false), "Meta predicts the CPU");
    assert_eq!(unpacked, run(Device::META, true), "Meta predicts the CPU");
    // The whole f32 identity gives way to one time step of it.
    let f32_bytes = 4 * (T * N * C * HW * HW) as u64;
    assert_eq!(
        unpacked - packed,
        f32_bytes - f32_bytes / T as u64,
        "addition peaks: identity unpacked {unpacked}, added packed {packed}"
    );
    let store = fingerprint(&residual_model(Device::Cpu, false), 2, N);
    let mut m = residual_model(Device::Cpu, false);
    m.apply_plan(&plan).unwrap();
    assert_eq!(fingerprint(&m, 2, N), store);
}

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

/// (bytes held at the end of the forward pass, step peak) under `plan`.
fn end_of_forward(plan: &Plan, device: Device) -> (u64, u64) {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let probe = Arc::new(EndOfForward::default());
    let _sub = tracker.subscribe(probe.clone());
    let mut m = model(device);
    m.apply_plan(plan).unwrap();
    trainer(&m)
        .step(&m, &batch(&m, N, 0), StepOptions::default())
        .unwrap();
    let held = *probe.0.lock().unwrap();
    (held, tracker.peak_bytes())
}

#[test]
fn storing_packed_keeps_a_layers_spike_input_at_one_bit_per_value_and_stays_exact() {
    let store = end_of_forward(&Plan::store_all(), Device::Cpu);
    let packed_plan = Plan::from_entries([("block", Policy::StorePacked)]);
    let packed = end_of_forward(&packed_plan, Device::Cpu);
    assert_eq!(
        store,
        end_of_forward(&Plan::store_all(), Device::META),
        "Meta predicts the CPU"
    );
    assert_eq!(
        packed,
        end_of_forward(&packed_plan, Device::META),
        "Meta predicts the CPU"
    );
    // block.conv's input (sn0's spikes) is kept as its payload instead of as f32.
    let values = (T * N * C * HW * HW) as u64;
    assert_eq!(store.0 - packed.0, 4 * values - values.div_ceil(8));
    assert!(
        packed.1 < store.1,
        "step peaks: stored packed {}, stored {}",
        packed.1,
        store.1
    );
    let baseline = fingerprint(&model(Device::Cpu), 2, N);
    for plan in [
        packed_plan,
        Plan::from_entries([("", Policy::StorePacked)]),
        // Inside a recomputation the layers keep packing.
        Plan::from_entries([("", Policy::StorePacked), ("block", Policy::CHECKPOINT)]),
        Plan {
            update_in_backward: false,
            entries: vec![PlanEntry {
                path: "block".into(),
                children: Some([1, 3]),
                into_next: 0,
                policy: Policy::StorePacked,
            }],
            ..Plan::store_all()
        },
    ] {
        let mut m = model(Device::Cpu);
        m.apply_plan(&plan).unwrap();
        assert_eq!(fingerprint(&m, 2, N), baseline, "{plan:?}");
    }
}
