//! CUDA-event timing on a GPU (skipped with the reason elsewhere; a failure under
//! MEMOPT_REQUIRE_GPU=1): a step of a small zoo model on `cuda:0` is timed by events on the
//! GPU's stream, every module's forward and backward gets a time, and no module's time exceeds
//! the step's.

use memopt_checkpoint::Plan;
use memopt_core::cuda::gpu_or_skip;
use memopt_core::{Device, Phase};
use memopt_profiler::{TimingProfiler, Workload};

#[test]
fn gpu_steps_are_timed_with_cuda_events() {
    if !gpu_or_skip("gpu_steps_are_timed_with_cuda_events") {
        return;
    }
    let workload = Workload::zoo_small("spiking-mlp", 4).unwrap();
    let report = TimingProfiler::new(1, 3)
        .profile(&workload, &Plan::store_all(), Device::Cuda(0))
        .unwrap();
    assert_eq!(report.device, Device::Cuda(0));
    assert!(report.step_ms > 0.0, "{report:?}");
    let root_forward = report.median_ms("", Phase::Forward);
    assert!(root_forward > 0.0 && root_forward <= report.step_ms, "{report:?}");
    for m in &report.modules {
        assert!(m.median_ms <= report.step_ms * 1.000_001, "{m:?} beyond the step");
    }
}
