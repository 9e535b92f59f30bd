//! The time cost model: forward, backward and recompute time per module from FLOPs and bytes,
//! and the extra time a plan costs.

use super::collect::{ModuleCostEntry, collect};
use crate::Result;
use crate::timing::TimingReport;
use crate::workload::Workload;
use memopt_checkpoint::{Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_core::{ModulePath, Phase};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How fast the device computes and moves data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Floating-point operations per second.
    pub flops_per_s: f64,
    /// Bytes read or written per second.
    pub bytes_per_s: f64,
}

impl Throughput {
    /// A conservative guess for a few CPU cores (20 GFLOP/s, 8 GB/s); calibrate for real
    /// figures.
    pub fn cpu_default() -> Self {
        Throughput {
            flops_per_s: 20e9,
            bytes_per_s: 8e9,
        }
    }
}

/// Multipliers fitted per module type by [`CostModel::calibrate`] (1 when not calibrated).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TypeFactors {
    /// Measured over predicted forward time.
    pub forward: f64,
    /// Measured over predicted backward time.
    pub backward: f64,
}

impl Default for TypeFactors {
    fn default() -> Self {
        TypeFactors {
            forward: 1.0,
            backward: 1.0,
        }
    }
}

/// Predicts step time without running: each module's forward time is
/// `flops / flops_per_s + bytes / bytes_per_s` times its type's factor, its backward time
/// `backward_ratio` times that (times the backward factor), a recomputation costs one more
/// forward, and compression moves the saved input and its payload once each way.
/// [`CostModel::calibrate`] fits the factors and the time outside modules (loss, glue,
/// optimizer) to a [`TimingReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// What the costs are of.
    pub workload: String,
    /// Device speed.
    pub throughput: Throughput,
    /// Backward over forward time before calibration (2: gradients of inputs and weights).
    pub backward_ratio: f64,
    /// Fitted multipliers by module type.
    pub factors: BTreeMap<String, TypeFactors>,
    /// Forward time outside any leaf module (loss, reshapes), in milliseconds.
    pub forward_overhead_ms: f64,
    /// Backward time outside any leaf module, in milliseconds.
    pub backward_overhead_ms: f64,
    /// Measured optimizer update time, in milliseconds (`None`: predicted from bytes).
    pub optimizer_ms: Option<f64>,
    /// Parameter bytes (the optimizer update reads and writes them).
    pub param_bytes: u64,
    /// Per-module forward costs, parents before children.
    pub modules: Vec<ModuleCostEntry>,
}

/// Whether `path` is `ancestor` or below it.
fn within(path: &str, ancestor: &str) -> bool {
    ModulePath::from(path).is_under(ancestor)
}

impl CostModel {
    /// The cost model of `workload`, from one step on Meta (nothing is computed).
    pub fn from_workload(workload: &Workload, throughput: Throughput) -> Result<CostModel> {
        let (modules, param_bytes) = collect(workload)?;
        Ok(CostModel {
            workload: workload.describe(),
            throughput,
            backward_ratio: 2.0,
            factors: BTreeMap::new(),
            forward_overhead_ms: 0.0,
            backward_overhead_ms: 0.0,
            optimizer_ms: None,
            param_bytes,
            modules,
        })
    }

    fn raw_ms(&self, e: &ModuleCostEntry) -> f64 {
        1e3 * (e.flops as f64 / self.throughput.flops_per_s + e.bytes as f64 / self.throughput.bytes_per_s)
    }

    fn factors_of(&self, e: &ModuleCostEntry) -> TypeFactors {
        self.factors.get(&e.module_type).copied().unwrap_or_default()
    }

    fn entry_forward_ms(&self, e: &ModuleCostEntry) -> f64 {
        self.raw_ms(e) * self.factors_of(e).forward
    }

    fn entry_backward_ms(&self, e: &ModuleCostEntry) -> f64 {
        self.raw_ms(e) * self.backward_ratio * self.factors_of(e).backward
    }

    /// Predicted forward time of the module at `path`, its children included, in milliseconds
    /// (the root includes the time outside modules).
    pub fn forward_ms(&self, path: &str) -> f64 {
        let modules: f64 = self
            .modules
            .iter()
            .filter(|e| within(&e.path, path))
            .map(|e| self.entry_forward_ms(e))
            .sum();
        modules
            + if path.is_empty() {
                self.forward_overhead_ms
            } else {
                0.0
            }
    }

    /// Predicted backward time of the module at `path`, children included, in milliseconds.
    pub fn backward_ms(&self, path: &str) -> f64 {
        let modules: f64 = self
            .modules
            .iter()
            .filter(|e| within(&e.path, path))
            .map(|e| self.entry_backward_ms(e))
            .sum();
        modules
            + if path.is_empty() {
                self.backward_overhead_ms
            } else {
                0.0
            }
    }

    /// Predicted recompute time of the module at `path` (one more forward), in milliseconds.
    pub fn recompute_ms(&self, path: &str) -> f64 {
        self.forward_ms(path)
    }

    /// Predicted optimizer update, in milliseconds: measured when calibrated, otherwise five
    /// passes over the parameter bytes (read parameter, gradient, state; write parameter,
    /// state).
    pub fn optimizer_update_ms(&self) -> f64 {
        self.optimizer_ms
            .unwrap_or(1e3 * 5.0 * self.param_bytes as f64 / self.throughput.bytes_per_s)
    }

    /// Predicted time of a step storing everything, in milliseconds.
    pub fn baseline_step_ms(&self) -> f64 {
        self.forward_ms("") + self.backward_ms("") + self.optimizer_update_ms()
    }

    /// Predicted extra time of `plan` over the baseline, in milliseconds: every module runs one
    /// more forward per recomputing plan entry at or above it (nested checkpoints recompute
    /// their inside once per enclosing segment), and each entry's saved input is compressed and
    /// decompressed (and, when offloaded, copied out and back) once. An entry naming a run of
    /// children covers those children; its saved input is the first one's. A segment run in
    /// time chunks adds the passes of its training BatchNorms
    /// (`batch_norm_passes_ms`).
    pub fn plan_extra_ms(&self, plan: &Plan) -> f64 {
        let targets: Vec<(Vec<String>, Policy)> = plan
            .entries
            .iter()
            .filter(|e| e.policy.recomputes())
            .map(|e| (self.covered(e), e.policy))
            .collect();
        let recompute: f64 = self
            .modules
            .iter()
            .map(|m| {
                let times = targets
                    .iter()
                    .filter(|(paths, _)| paths.iter().any(|p| within(&m.path, p)))
                    .count();
                times as f64 * self.entry_forward_ms(m)
            })
            .sum();
        let transfer: u64 = targets
            .iter()
            .filter_map(|(paths, policy)| paths.first().map(|p| self.saved_input_traffic(p, *policy)))
            .sum();
        // Chunked segments with training BatchNorm run passes; one nested in another chunked
        // segment finds the statistics given and runs none.
        let chunked: Vec<&Vec<String>> = targets
            .iter()
            .filter(|(_, policy)| policy.chunks() > 1)
            .map(|(paths, _)| paths)
            .collect();
        let passes: f64 = chunked
            .iter()
            .filter(|paths| {
                !chunked
                    .iter()
                    .any(|outer| outer != *paths && paths.iter().all(|p| outer.iter().any(|o| within(p, o))))
            })
            .map(|paths| self.batch_norm_passes_ms(paths))
            .sum();
        recompute + passes + 1e3 * transfer as f64 / self.throughput.bytes_per_s
    }

    /// The extra passes of a segment (the modules under `paths`) run in time chunks, for its
    /// training BatchNorms (`memopt_checkpoint`'s `policy/chunk_passes.rs`), in milliseconds:
    /// per BatchNorm a statistics pass in forward (the leaves up to it, once more) and a
    /// gradient-sums pass in backward (the whole segment's forward once more, and the backward
    /// of the BatchNorm and the leaves after it). Leaves in module order stand for the order in
    /// which they run. Zero without BatchNorm.
    fn batch_norm_passes_ms(&self, paths: &[String]) -> f64 {
        let leaves: Vec<&ModuleCostEntry> = self
            .modules
            .iter()
            .filter(|m| m.leaf && paths.iter().any(|p| within(&m.path, p)))
            .collect();
        let forward: Vec<f64> = leaves.iter().map(|m| self.entry_forward_ms(m)).collect();
        let whole: f64 = forward.iter().sum();
        leaves
            .iter()
            .enumerate()
            .filter(|(_, m)| m.module_type.starts_with("BatchNorm"))
            .map(|(i, _)| {
                let statistics: f64 = forward[..=i].iter().sum();
                let sums: f64 = leaves[i..].iter().map(|m| self.entry_backward_ms(m)).sum();
                statistics + whole + sums
            })
            .sum()
    }

    /// The module paths a plan entry covers: its module, or the children of its run.
    fn covered(&self, e: &PlanEntry) -> Vec<String> {
        let Some([start, end]) = e.children else {
            return vec![e.path.clone()];
        };
        let names = self
            .modules
            .iter()
            .find(|m| m.path == e.path)
            .map(|m| m.children.as_slice())
            .unwrap_or_default();
        names
            .iter()
            .take(end)
            .skip(start)
            .map(|n| {
                if e.path.is_empty() {
                    n.clone()
                } else {
                    format!("{}.{n}", e.path)
                }
            })
            .collect()
    }

    /// The extra time of `plan` as a fraction of the baseline step (0.2 = 20% slower).
    pub fn plan_overhead(&self, plan: &Plan) -> f64 {
        self.plan_extra_ms(plan) / self.baseline_step_ms().max(f64::MIN_POSITIVE)
    }

    /// Bytes moved to save and restore `path`'s inputs under `policy`.
    fn saved_input_traffic(&self, path: &str, policy: Policy) -> u64 {
        let (compressor, offload) = match policy {
            Policy::Store => return 0,
            Policy::Checkpoint { compressor, .. } => (compressor, false),
            Policy::Offload { compressor } => (compressor, true),
        };
        let Some(entry) = self.modules.iter().find(|m| m.path == path) else {
            return 0;
        };
        entry
            .inputs
            .iter()
            .map(|x| {
                let kind = if compressor.requires_binary() && !x.is_spike {
                    CompressorKind::Null
                } else {
                    compressor
                };
                let payload = kind.build().packed_size(&x.shape, x.dtype).upper_bound();
                let (payload, codec) = if kind == CompressorKind::Null {
                    (x.bytes(), 0)
                } else {
                    // compress: read input, write payload; decompress: the reverse.
                    (payload, 2 * (x.bytes() + payload))
                };
                codec + if offload { 2 * payload } else { 0 }
            })
            .sum()
    }

    /// Fits the per-type factors, the time outside modules and the optimizer time to a
    /// measurement: each type's factor makes its leaves' summed prediction equal their summed
    /// median time (forward and backward separately).
    pub fn calibrate(&mut self, timing: &TimingReport) {
        let mut sums: BTreeMap<String, [f64; 4]> = BTreeMap::new();
        for e in self.modules.iter().filter(|e| e.leaf) {
            let raw = self.raw_ms(e);
            let s = sums.entry(e.module_type.clone()).or_default();
            s[0] += timing.median_ms(&e.path, Phase::Forward);
            s[1] += raw;
            s[2] += timing.median_ms(&e.path, Phase::Backward);
            s[3] += raw * self.backward_ratio;
        }
        for (ty, [mf, pf, mb, pb]) in sums {
            let f = self.factors.entry(ty).or_default();
            if mf > 0.0 && pf > 0.0 {
                f.forward = mf / pf;
            }
            if mb > 0.0 && pb > 0.0 {
                f.backward = mb / pb;
            }
        }
        let leaves_fwd: f64 = self
            .modules
            .iter()
            .filter(|e| e.leaf)
            .map(|e| self.entry_forward_ms(e))
            .sum();
        let leaves_bwd: f64 = self
            .modules
            .iter()
            .filter(|e| e.leaf)
            .map(|e| self.entry_backward_ms(e))
            .sum();
        self.forward_overhead_ms = (timing.median_ms("", Phase::Forward) - leaves_fwd).max(0.0);
        self.backward_overhead_ms = (timing.median_ms("", Phase::Backward) - leaves_bwd).max(0.0);
        if timing.module("", Phase::Optimizer).is_some() {
            self.optimizer_ms = Some(timing.median_ms("", Phase::Optimizer));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn within_respects_path_segments() {
        assert!(within("features.3.neuron", "features.3"));
        assert!(within("features.3", "features.3"));
        assert!(within("anything", ""));
        assert!(!within("features.30", "features.3"));
        assert!(!within("features", "features.3"));
    }
}
