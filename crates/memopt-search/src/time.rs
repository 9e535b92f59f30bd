//! Predicted time: a module's forward time from its FLOPs and bytes, and what a policy adds.

use crate::sites::Site;
use memopt_checkpoint::Policy;
use memopt_checkpoint::module::ModuleCost;
use memopt_compress::CompressorKind;
use serde::{Deserialize, Serialize};

/// Throughputs that turn costs into time. The defaults are this project's CPU figures (GEMM
/// near 150 GFLOP/s on two cores, memory-bound kernels near 10 GB/s, bit-packing at memcpy
/// speed); calibrate them from a timing profile for other machines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimeModel {
    /// Arithmetic throughput, GFLOP/s.
    pub gflops: f64,
    /// Memory throughput of elementwise kernels, GB/s.
    pub gbps: f64,
    /// Throughput of packing or unpacking spikes, GB/s of f32 input.
    pub codec_gbps: f64,
    /// Backward time as a multiple of forward time.
    pub backward_factor: f64,
}

impl Default for TimeModel {
    fn default() -> Self {
        TimeModel {
            gflops: 150.0,
            gbps: 10.0,
            codec_gbps: 10.0,
            backward_factor: 2.0,
        }
    }
}

impl TimeModel {
    /// Forward time of work costing `cost`, in ms (compute and memory traffic overlap: the
    /// slower of the two).
    pub fn forward_ms(&self, cost: ModuleCost) -> f64 {
        let compute = cost.flops as f64 / (self.gflops * 1e6);
        let memory = cost.bytes as f64 / (self.gbps * 1e6);
        compute.max(memory)
    }

    /// Predicted time of a step storing everything, in ms.
    pub fn step_ms(&self, root: &Site) -> f64 {
        self.forward_ms(root.cost) * (1.0 + self.backward_factor)
    }

    /// Time `policy` adds to `site` over storing it, in ms: its recomputation, and packing and
    /// unpacking its input when that is compressed.
    pub fn extra_ms(&self, site: &Site, policy: &Policy) -> f64 {
        let compressor = match policy {
            Policy::Store => return 0.0,
            Policy::Checkpoint { compressor, .. } | Policy::Offload { compressor } => *compressor,
        };
        let spikes: u64 = site.inputs.iter().filter(|i| i.is_spike).map(|i| i.bytes()).sum();
        let codec = if compressor != CompressorKind::Null {
            2.0 * spikes as f64 / (self.codec_gbps * 1e6)
        } else {
            0.0
        };
        self.forward_ms(site.cost) + codec
    }
}
