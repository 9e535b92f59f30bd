//! A custom model that declares spike input: the batch carries the spike flag, so a checkpoint
//! of the first segment keeps its input bit-packed, and the plan still verifies on the CPU.
//! (The batch itself stays alive for the whole step, so the packed copy adds to the peak rather
//! than replacing anything: the planners measure that exactly and choose accordingly.)

use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{Plan, Policy};
use memopt_core::Device;
use memopt_core::memory::Phase;
use memopt_profiler::{Estimator, Workload, verify_plan};

fn model(spikes: bool) -> Workload {
    let json = format!(
        r#"{{"name": "tiny", "input": {{"time_steps": 2, "sample": [2, 8, 8], "classes": 3, "spikes": {spikes}}},
            "layers": [{{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}}, {{"type": "lif"}},
                       {{"type": "flatten"}}, {{"type": "linear", "out": 3}}]}}"#
    );
    let custom = CustomModel::from_json(&json).expect("a valid model");
    let spec = custom.spec().clone();
    Workload::custom("tiny", move |device, seed| custom.build(&spec, device, seed), 2)
}

fn packed_bytes_of_layer_0(workload: &Workload, plan: &Plan) -> u64 {
    let report = Estimator::new(workload).unwrap().report(plan).unwrap();
    report
        .module("0", Phase::Forward)
        .expect("layer 0 runs in forward")
        .packed_bytes
}

#[test]
fn declared_spike_input_is_packed_by_a_first_segment_checkpoint() {
    let plan = Plan::from_entries([("0", Policy::CHECKPOINT)]);
    // The saved input of layer 0: T*N*2*8*8 = 512 values, bit-packed to 64 bytes when the
    // input is declared spikes; kept as the batch itself (nothing packed) otherwise.
    assert_eq!(packed_bytes_of_layer_0(&model(true), &plan), 512 / 8);
    assert_eq!(packed_bytes_of_layer_0(&model(false), &plan), 0);
    for spikes in [false, true] {
        let check = verify_plan(&model(spikes), &plan, Device::Cpu).unwrap();
        assert!(check.passed(), "spikes {spikes}: {}", check.summary());
    }
}
