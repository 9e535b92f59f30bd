//! The time cost model: forward, backward and recompute time per module from FLOPs and bytes,
//! and the extra time a plan costs.

use super::collect::{InputInfo, ModuleCostEntry, collect};
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

/// Multipliers fitted per module type by [`CostModel::calibrate`] and
/// [`CostModel::calibrate_recompute`] (1 when not calibrated).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeFactors {
    /// Measured over predicted forward time.
    pub forward: f64,
    /// Measured over predicted backward time.
    pub backward: f64,
    /// Measured recomputation time over predicted forward time of a module that ends its
    /// recomputed segment: its outputs are read by no one, so it materialises only what its own
    /// backward keeps (a convolution then computes nothing, a BatchNorm only its statistics).
    /// A recomputation whose outputs are read runs the forward's kernels and is priced at the
    /// `forward` factor. Read from `recompute` in calibrations written before the distinction.
    #[serde(alias = "recompute")]
    pub recompute_last: f64,
}

impl Default for TypeFactors {
    fn default() -> Self {
        TypeFactors {
            forward: 1.0,
            backward: 1.0,
            recompute_last: 1.0,
        }
    }
}

/// Predicts step time without running: each module's forward time is
/// `flops / flops_per_s + bytes / bytes_per_s` times its type's forward factor, its backward
/// time `backward_ratio` times that raw figure times the backward factor, a recomputation the
/// raw figure times the forward factor (the recompute factor for the module that ends its
/// segment, see [`TypeFactors::recompute_last`]), and a checkpoint's saved input costs its packing and
/// unpacking ([`CostModel::saved_input_ms`]). Uncalibrated, every factor is 1 and packing is
/// priced by bytes moved. [`CostModel::calibrate`] fits the forward and backward factors and
/// the time outside modules (loss, glue, optimizer) to a [`TimingReport`] of a step storing
/// everything, [`CostModel::calibrate_recompute`] the recompute factors to one that checkpoints
/// leaves, [`CostModel::calibrate_codecs`] the compressors' speeds; a saved
/// [`super::Calibration`] carries them to other workloads on the same device.
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
    /// Measured packing and unpacking speed per compressor (by [`CompressorKind::name`]);
    /// a compressor not in it is priced by the bytes it moves at `throughput.bytes_per_s`.
    #[serde(default)]
    pub codecs: BTreeMap<String, CodecSpeed>,
    /// Time steps T of the workload (0: unknown, in cost models saved before it was recorded);
    /// prices the chunk replays of boundaries not kept
    /// ([`memopt_checkpoint::ChunkBoundaries::Replayed`], `KeptEvery`).
    #[serde(default)]
    pub time_steps: usize,
    /// Speed of moving a saved payload to host memory (`compress_bytes_per_s`) and back
    /// (`decompress_bytes_per_s`), in bytes per second, for [`Policy::Offload`]: measured by
    /// a calibration ([`crate::TimingProfiler::profile_host_link`]), or for an uncalibrated
    /// GPU target the guess [`CostModel::guessed_gpu_host_link`]; `None` (a CPU target, whose
    /// host is itself): both at `throughput.bytes_per_s`.
    #[serde(default)]
    pub host_link: Option<CodecSpeed>,
    /// Whether host memory is separate from the device's (a GPU target): only then does an
    /// offloaded segment move its kept boundary states (on the CPU they stay where they are,
    /// and only the saved input is copied). False in cost models saved before it was recorded.
    #[serde(default)]
    pub separate_host: bool,
}

/// How fast a compressor packs and unpacks on a device, in bytes of the unpacked tensor per
/// second (measured by [`crate::TimingProfiler::profile_codec`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodecSpeed {
    /// Unpacked bytes packed per second.
    pub compress_bytes_per_s: f64,
    /// Unpacked bytes restored per second.
    pub decompress_bytes_per_s: f64,
}

/// Whether `path` is `ancestor` or below it.
pub(super) fn within(path: &str, ancestor: &str) -> bool {
    ModulePath::str_is_under(path, ancestor)
}

impl CostModel {
    /// The cost model of `workload`, from one step on Meta (nothing is computed).
    pub fn from_workload(workload: &Workload, throughput: Throughput) -> Result<CostModel> {
        let (modules, param_bytes, time_steps) = collect(workload)?;
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
            codecs: BTreeMap::new(),
            time_steps,
            host_link: workload
                .meta_device()
                .has_separate_host()
                .then(|| Self::guessed_gpu_host_link(throughput)),
            separate_host: workload.meta_device().has_separate_host(),
        })
    }

    pub(super) fn raw_ms(&self, e: &ModuleCostEntry) -> f64 {
        1e3 * (e.flops as f64 / self.throughput.flops_per_s + e.bytes as f64 / self.throughput.bytes_per_s)
    }

    pub(super) fn factors_of(&self, e: &ModuleCostEntry) -> TypeFactors {
        self.factors.get(&e.module_type).copied().unwrap_or_default()
    }

    fn entry_forward_ms(&self, e: &ModuleCostEntry) -> f64 {
        self.raw_ms(e) * self.factors_of(e).forward
    }

    /// The forward time of `e` the throughputs alone predict, in milliseconds.
    pub(super) fn raw_forward_ms(&self, e: &ModuleCostEntry) -> f64 {
        self.raw_ms(e)
    }

    /// Predicted forward and backward time of all leaf modules, in milliseconds.
    pub(super) fn leaves_ms(&self) -> (f64, f64) {
        self.modules
            .iter()
            .filter(|e| e.leaf)
            .fold((0.0, 0.0), |(f, b), e| {
                (f + self.entry_forward_ms(e), b + self.entry_backward_ms(e))
            })
    }

    pub(super) fn entry_backward_ms(&self, e: &ModuleCostEntry) -> f64 {
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

    /// Predicted time of recomputing the module at `path` as a segment (one more forward at
    /// each type's forward factor, the leaf that ends it at its recompute factor), in
    /// milliseconds.
    pub fn recompute_ms(&self, path: &str) -> f64 {
        self.segment_recompute_ms(&[path.to_string()])
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
    /// their inside once per enclosing segment; [`CostModel::recompute_ms`] prices one), each entry's saved input is compressed and
    /// decompressed (and, when offloaded, copied out and back), and under
    /// [`Policy::StorePacked`] the layers' spike inputs are packed and unpacked once. An entry
    /// naming a run of children covers those children; its saved input is the first one's. A
    /// segment run in time chunks adds the passes of its training BatchNorms
    /// (`batch_norm_passes_ms`).
    pub fn plan_extra_ms(&self, plan: &Plan) -> f64 {
        let targets: Vec<(Vec<String>, Policy)> = plan
            .entries
            .iter()
            .filter(|e| e.policy.recomputes())
            .map(|e| (self.covered(e), e.policy))
            .collect();
        let recompute: f64 = targets
            .iter()
            .map(|(paths, _)| self.segment_recompute_ms(paths))
            .sum();
        let saved: f64 = targets
            .iter()
            .filter_map(|(paths, policy)| {
                let statistics = !self.nested_in_chunks(paths, &targets);
                let restores = self.saved_input_restores(paths, *policy, statistics);
                let states = self.offloaded_states_ms(paths, *policy, statistics);
                paths
                    .first()
                    .map(|p| self.saved_input_ms_restored(p, *policy, restores) + states)
            })
            .sum();
        let packed_stores: f64 = plan
            .entries
            .iter()
            .filter(|e| e.policy == Policy::StorePacked)
            .map(|e| self.packed_store_ms(&self.covered(e)))
            .sum();
        // Chunked segments with training BatchNorm run passes; one nested in another chunked
        // segment finds the statistics given and runs none.
        let chunked: Vec<(&Vec<String>, Policy)> = targets
            .iter()
            .filter(|(_, policy)| policy.chunks() > 1)
            .map(|(paths, policy)| (paths, *policy))
            .collect();
        let nested = |paths: &Vec<String>| self.nested_in_chunks(paths, &targets);
        let passes: f64 = chunked
            .iter()
            .filter(|(paths, _)| !nested(paths))
            .map(|(paths, policy)| self.batch_norm_passes_ms(paths, *policy))
            .sum();
        let replays: f64 = chunked
            .iter()
            .map(|(paths, policy)| self.boundary_replays_ms(paths, *policy, !nested(paths)))
            .sum();
        recompute + saved + passes + packed_stores + replays
    }

    /// Whether the segment of `paths` lies inside another segment of `targets` that runs in
    /// time chunks (it then finds its BatchNorm statistics given and runs no passes).
    fn nested_in_chunks(&self, paths: &[String], targets: &[(Vec<String>, Policy)]) -> bool {
        targets.iter().any(|(outer, policy)| {
            policy.chunks() > 1
                && outer.as_slice() != paths
                && paths.iter().all(|p| outer.iter().any(|o| within(p, o)))
        })
    }

    /// Predicted time of [`Policy::StorePacked`] over `paths`, in milliseconds: every
    /// convolution and linear layer below them whose input is f32 spikes (or f32 pooled spikes)
    /// packs it in forward (bit-packed, or as spike counts) and unpacks it in backward, at the
    /// measured speed of the codec ([`Self::codec_speed`]) when the model has one
    /// ([`CostModel::codecs`]), otherwise the bytes moved ([`Self::packed_store_traffic`]) at
    /// `throughput.bytes_per_s`.
    pub fn packed_store_ms(&self, paths: &[String]) -> f64 {
        self.packed_store_inputs(paths)
            .map(|(x, kind)| match self.codec_speed(kind) {
                Some(speed) => {
                    let bytes = x.bytes() as f64;
                    1e3 * (bytes / speed.compress_bytes_per_s + bytes / speed.decompress_bytes_per_s)
                }
                None => 1e3 * packed_traffic(x, kind) as f64 / self.throughput.bytes_per_s,
            })
            .sum()
    }

    /// The f32 spike and pooled-spike inputs of the convolution and linear layers under
    /// `paths`, each with the codec that keeps it: what [`Policy::StorePacked`] packs.
    fn packed_store_inputs<'a>(
        &'a self,
        paths: &'a [String],
    ) -> impl Iterator<Item = (&'a InputInfo, CompressorKind)> + 'a {
        self.modules
            .iter()
            .filter(|m| m.leaf && matches!(m.module_type.as_str(), "Conv2d" | "Linear"))
            .filter(move |m| paths.iter().any(|p| within(&m.path, p)))
            .filter_map(|m| m.inputs.first())
            .filter(|x| x.dtype == memopt_core::DType::F32)
            .map(|x| (x, CompressorKind::BitSpike.keeping(x.known_values())))
            .filter(|(_, kind)| *kind != CompressorKind::Null)
    }

    /// Bytes moved by [`Policy::StorePacked`] over `paths` (the uncalibrated pricing of
    /// [`Self::packed_store_ms`]): each packed input is read and its payload written in
    /// forward, and the reverse in backward.
    pub fn packed_store_traffic(&self, paths: &[String]) -> u64 {
        self.packed_store_inputs(paths)
            .map(|(x, kind)| packed_traffic(x, kind))
            .sum()
    }

    /// The measured speed of compressor `kind` ([`CostModel::codecs`]); spike counts, which no
    /// calibration times (they need pooled spikes), move the bytes [`CompressorKind::U8`] moves
    /// (4 read and 1 written per value) and are priced at its speed.
    pub fn codec_speed(&self, kind: CompressorKind) -> Option<&CodecSpeed> {
        match kind {
            CompressorKind::SpikeCounts => self.codecs.get(CompressorKind::U8.name()),
            _ => self.codecs.get(kind.name()),
        }
    }

    /// The module paths a plan entry covers: its module, or the links of its run (with the
    /// next child's first links when the run goes on into it, [`PlanEntry::into_next`]).
    fn covered(&self, e: &PlanEntry) -> Vec<String> {
        let Some([start, end]) = e.children else {
            return vec![e.path.clone()];
        };
        // Only the names the run covers are joined into paths (a run of a long chain's
        // container would otherwise format the whole chain).
        let chain_of = |path: &str| -> &[String] {
            self.modules
                .iter()
                .find(|m| m.path == path)
                .map(ModuleCostEntry::chain)
                .unwrap_or_default()
        };
        let join = |path: &str, name: &str| ModulePath::from(path).child(name).as_str().to_string();
        let links = chain_of(&e.path);
        let mut out: Vec<String> = links
            .iter()
            .take(end)
            .skip(start)
            .map(|n| join(&e.path, n))
            .collect();
        if e.into_next > 0
            && let Some(next) = links.get(end).map(|n| join(&e.path, n))
        {
            out.extend(chain_of(&next).iter().take(e.into_next).map(|n| join(&next, n)));
        }
        out
    }

    /// The extra time of `plan` as a fraction of the baseline step (0.2 = 20% slower).
    pub fn plan_overhead(&self, plan: &Plan) -> f64 {
        self.plan_extra_ms(plan) / self.baseline_step_ms().max(f64::MIN_POSITIVE)
    }

    /// Predicted time to save and restore `path`'s inputs under `policy`, in milliseconds:
    /// packing and unpacking at the measured speed of the compressor when the model has one
    /// ([`CostModel::codecs`]), otherwise the bytes the codec moves at `throughput.bytes_per_s`;
    /// an offloaded payload is copied out once and back once ([`Self::host_copies_ms`]). Spikes
    /// read packed (see [`Self::saved_input_traffic`]) are unpacked twice, each time at the
    /// measured unpacking speed. For a whole plan, [`Self::plan_extra_ms`] also counts the
    /// payload's further trips back in a chunked segment's passes and offloaded boundary
    /// states.
    pub fn saved_input_ms(&self, path: &str, policy: Policy) -> f64 {
        self.saved_input_ms_restored(path, policy, 1.0)
    }

    /// [`Self::saved_input_ms`] for a segment whose backward brings an offloaded payload back
    /// `restores` times ([`Self::saved_input_restores`]; once without chunks).
    fn saved_input_ms_restored(&self, path: &str, policy: Policy, restores: f64) -> f64 {
        let Some(compressor) = policy.compressor() else {
            return 0.0;
        };
        let offload = policy.offloads();
        let Some(entry) = self.modules.iter().find(|m| m.path == path) else {
            return 0.0;
        };
        let layer_reads_packed = self.first_layer_reads_packed(path);
        let per_s = self.throughput.bytes_per_s;
        entry
            .inputs
            .iter()
            .map(|x| {
                let kind = compressor.keeping(x.known_values());
                let payload = payload_bytes(x, kind);
                let moved = if offload {
                    self.host_copies_ms(payload, restores)
                } else {
                    0.0
                };
                let Some(speed) = self.codec_speed(kind).filter(|_| kind != CompressorKind::Null) else {
                    return 1e3 * kept_input_bytes(x, kind, false, layer_reads_packed) as f64 / per_s + moved;
                };
                let bytes = x.bytes() as f64;
                let unpacks = if reads_packed(x, kind, layer_reads_packed) {
                    2.0
                } else {
                    1.0
                };
                let codec = 1e3
                    * (bytes / speed.compress_bytes_per_s + unpacks * bytes / speed.decompress_bytes_per_s);
                codec + moved
            })
            .sum()
    }

    /// Whether the segment at `path` starts with a convolution or a linear layer, which reads
    /// bit-packed f32 spikes packed. Modules come parents first, in model order: the first leaf
    /// at or below `path` is the segment's first layer.
    fn first_layer_reads_packed(&self, path: &str) -> bool {
        self.modules
            .iter()
            .find(|m| m.leaf && within(&m.path, path))
            .is_some_and(|m| matches!(m.module_type.as_str(), "Conv2d" | "Linear"))
    }

    /// Bytes moved to save and restore `path`'s inputs under `policy` once: what
    /// [`Self::saved_input_ms`] prices at `throughput.bytes_per_s` when uncalibrated, plus an
    /// offloaded payload's copy out and back (priced at the host link there). Compressing reads
    /// the input and writes the payload; each decompression reads the payload and writes the
    /// input. Bit-packed f32
    /// spikes are read packed by a segment whose first layer is a convolution or a linear
    /// layer: it unpacks them one time step at a time twice, in the recomputation and for the
    /// weight gradient, instead of once whole; spike counts before such a layer are decompressed
    /// whole twice, for the same two reads. (Later readers of the same input, a residual
    /// identity or a downsampling convolution, unpack it once or twice more; the per-module
    /// costs do not show which module reads which value, so they are not counted.)
    pub fn saved_input_traffic(&self, path: &str, policy: Policy) -> u64 {
        let Some(compressor) = policy.compressor() else {
            return 0;
        };
        let offload = policy.offloads();
        let Some(entry) = self.modules.iter().find(|m| m.path == path) else {
            return 0;
        };
        let layer_reads_packed = self.first_layer_reads_packed(path);
        entry
            .inputs
            .iter()
            .map(|x| {
                kept_input_bytes(
                    x,
                    compressor.keeping(x.known_values()),
                    offload,
                    layer_reads_packed,
                )
            })
            .sum()
    }

    /// Fits the per-type factors, the time outside modules and the optimizer time to a
    /// measurement of a step storing everything: each type's factor makes its leaves' summed
    /// prediction equal their summed median time (forward and backward separately);
    /// recomputation is predicted at the forward's factor until
    /// [`CostModel::calibrate_recompute`] measures it.
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
            // A type whose forward was not seen keeps its factors (1 when never calibrated).
            if !(mf > 0.0 && pf > 0.0) {
                continue;
            }
            let forward = mf / pf;
            self.factors.insert(
                ty,
                TypeFactors {
                    forward,
                    backward: if pb > 0.0 { mb / pb } else { forward },
                    // Until a recomputation is measured (`calibrate_recompute`), it is
                    // predicted to take a forward's time.
                    recompute_last: forward,
                },
            );
        }
        let (leaves_fwd, leaves_bwd) = self.leaves_ms();
        self.forward_overhead_ms = (timing.median_ms("", Phase::Forward) - leaves_fwd).max(0.0);
        self.backward_overhead_ms = (timing.median_ms("", Phase::Backward) - leaves_bwd).max(0.0);
        if timing.module("", Phase::Optimizer).is_some() {
            self.optimizer_ms = Some(timing.median_ms("", Phase::Optimizer));
        }
    }
}

/// Bytes moved to keep input `x` with compressor `kind` (already [`CompressorKind::keeping`])
/// and restore it (see [`CostModel::saved_input_traffic`]): compressing reads the input and
/// writes the payload, each decompression the reverse; kept as it is, nothing, but an offload
/// copies the payload out and back.
fn kept_input_bytes(x: &InputInfo, kind: CompressorKind, offload: bool, layer_reads_packed: bool) -> u64 {
    let payload = payload_bytes(x, kind);
    let codec = if kind == CompressorKind::Null {
        0
    } else {
        let unpacks = if reads_packed(x, kind, layer_reads_packed) {
            2
        } else {
            1
        };
        (1 + unpacks) * (x.bytes() + payload)
    };
    codec + if offload { 2 * payload } else { 0 }
}

/// Bytes of the payload that keeps input `x` with compressor `kind` (already
/// [`CompressorKind::keeping`]): the input itself when kept whole, else the packed size (its
/// upper bound for a data-dependent compressor).
fn payload_bytes(x: &InputInfo, kind: CompressorKind) -> u64 {
    if kind == CompressorKind::Null {
        x.bytes()
    } else {
        kind.build().packed_size(&x.shape, x.dtype).upper_bound()
    }
}

/// Whether a saved input kept with `kind` is unpacked twice, in the recomputation and for the
/// weight gradient, by the convolution or linear layer that starts its segment: bit-packed f32
/// spikes (one time step at a time each time) and spike counts (whole each time; the layer keeps
/// the counts, not the decompressed tensor).
fn reads_packed(x: &InputInfo, kind: CompressorKind, layer_reads_packed: bool) -> bool {
    matches!(kind, CompressorKind::BitSpike | CompressorKind::SpikeCounts)
        && x.dtype == memopt_core::DType::F32
        && layer_reads_packed
}

/// Bytes moved packing `x` with `kind` in forward and unpacking it in backward: the input read
/// and its payload written, then the reverse (a bit per value for spikes, a byte per value
/// for spike counts).
fn packed_traffic(x: &InputInfo, kind: CompressorKind) -> u64 {
    let elems = x.shape.elem_count() as u64;
    let payload = match kind {
        CompressorKind::SpikeCounts => elems,
        _ => elems.div_ceil(8),
    };
    2 * (x.bytes() + payload)
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
