//! Measuring a calibration and fitting it to the measurement.
//!
//! The measurement ([`Calibration::measure`]) times, on the device, two plans of one workload
//! in turns on one model ([`crate::TimingProfiler::profile_plans`]): storing everything (each
//! leaf type's forward and backward time, the time outside modules, the optimizer) and
//! checkpointing every leaf module (each type's recomputation as the module that ends its
//! segment, timed in the `recompute` phase: [`super::TypeFactors::recompute_last`]);
//! then it times each exact spike compressor packing and unpacking the workload's largest spike
//! input ([`crate::TimingProfiler::profile_codec`]). Nothing is assumed: recomputation and
//! packing are measured, not derived from the forward or from bytes moved.
//!
//! The fit ([`Calibration::fit`]) is arithmetic on those reports, separate from the timing, so
//! that tests can give it known times and check that it recovers the factors exactly.

use super::calibration::{CALIBRATION_FORMAT, Calibration, HostIdentity, MeasuredOn};
use super::collect::InputInfo;
use super::model::{CodecSpeed, CostModel, Throughput, TypeFactors};
use crate::Result;
use crate::error::ProfilerError;
use crate::timing::{CodecTiming, TimingProfiler, TimingReport};
use crate::workload::Workload;
use memopt_checkpoint::{Plan, Policy};
use memopt_compress::CompressorKind;
use memopt_core::{Device, Phase};
use std::collections::BTreeMap;

/// The compressors a calibration times: the exact ones whose packed size does not depend on the
/// data (the planners' choices for spikes). Other compressors stay priced by bytes moved.
pub const TIMED_CODECS: [CompressorKind; 2] = [CompressorKind::BitSpike, CompressorKind::U8];

/// The timings a calibration is fitted to.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationMeasurement {
    /// Steps storing everything.
    pub baseline: TimingReport,
    /// Steps under a plan that checkpoints leaf modules (its `plan` says which).
    pub checkpointed: TimingReport,
    /// Compressors packing and unpacking a spike tensor.
    pub codecs: Vec<CodecTiming>,
    /// The same tensor moved to host memory and back, as an offload moves a payload kept
    /// whole (`compress_ms`: to the host, `decompress_ms`: back; compressor `null`).
    pub host_link: Option<CodecTiming>,
}

/// A calibration with the measurement it was fitted to.
#[derive(Debug, Clone)]
pub struct CalibrationRun {
    /// The fitted calibration.
    pub calibration: Calibration,
    /// What was measured.
    pub measurement: CalibrationMeasurement,
}

/// The plan checkpointing every leaf module, each on its own (bit-packed where its input is
/// spikes): every leaf recomputes once, in the `recompute` phase under its own path.
pub fn every_leaf_checkpointed(model: &CostModel) -> Plan {
    Plan::from_entries(
        model
            .modules
            .iter()
            .filter(|m| m.leaf && !m.path.is_empty())
            .map(|m| (m.path.clone(), Policy::CHECKPOINT)),
    )
}

/// The shape of the largest spike input of any leaf module (what saved inputs look like), if
/// any module takes spikes.
pub fn largest_spike_input(model: &CostModel) -> Option<Vec<usize>> {
    largest_input_where(model, |x| x.is_spike)
}

/// The shape of the largest input of any leaf module, if any.
pub fn largest_input(model: &CostModel) -> Option<Vec<usize>> {
    largest_input_where(model, |_| true)
}

/// The shape of the largest input of a leaf module that `keep` accepts.
fn largest_input_where(model: &CostModel, keep: impl Fn(&InputInfo) -> bool) -> Option<Vec<usize>> {
    model
        .modules
        .iter()
        .filter(|m| m.leaf)
        .flat_map(|m| m.inputs.iter())
        .filter(|x| keep(x))
        .max_by_key(|x| x.bytes())
        .map(|x| x.shape.dims().to_vec())
}

impl Calibration {
    /// Measures `workload` on `device` (see the module documentation) with `profiler`'s
    /// warm-up and runs (the compressors get four times the runs: they take milliseconds) and
    /// fits a calibration.
    pub fn measure(workload: &Workload, device: Device, profiler: TimingProfiler) -> Result<CalibrationRun> {
        if device.is_meta() {
            return Err(ProfilerError::Invalid(format!(
                "a calibration times real steps; {device} computes nothing: use cpu or cuda:N"
            )));
        }
        let model = CostModel::from_workload(workload, Throughput::cpu_default())?;
        let plan = every_leaf_checkpointed(&model);
        let mut reports = profiler.profile_plans(workload, &[Plan::store_all(), plan], device)?;
        let (checkpointed, baseline) = match (reports.pop(), reports.pop()) {
            (Some(c), Some(b)) => (c, b),
            _ => {
                return Err(ProfilerError::Invalid(
                    "the timing profiler returned fewer reports than plans".into(),
                ));
            }
        };
        let mut codecs = Vec::new();
        let codec_profiler = TimingProfiler::new(profiler.warmup.max(1), profiler.runs.saturating_mul(4));
        if let Some(shape) = largest_spike_input(&model) {
            for kind in TIMED_CODECS {
                codecs.push(codec_profiler.profile_codec(kind, &shape, device)?);
            }
        }
        // The link is timed on the largest input of any kind (a model without spikes offloads
        // too): the largest spike input when there is one, as the codecs are.
        let host_link = match largest_spike_input(&model).or_else(|| largest_input(&model)) {
            Some(shape) => Some(codec_profiler.profile_host_link(&shape, device)?),
            None => None,
        };
        let measurement = CalibrationMeasurement {
            baseline,
            checkpointed,
            codecs,
            host_link,
        };
        let calibration = Calibration::fit(&model, &measurement, device, HostIdentity::this_process())?;
        Ok(CalibrationRun {
            calibration,
            measurement,
        })
    }

    /// Fits a calibration to `m`, the timings of the workload whose (uncalibrated) cost model
    /// is `model`, measured on `device` of `host`. Per module type, each factor makes the
    /// type's summed prediction equal its summed measured median (forward and backward from
    /// the baseline, recompute from the checkpointed steps); `overall` does the same over all
    /// types; the time outside leaves and the optimizer's are ratios to the leaves' time and to
    /// the parameter bytes; a codec's speed is the bytes it packed over its median time.
    /// Errors when the baseline is not a plan storing everything or the checkpointed steps
    /// recomputed nothing.
    pub fn fit(
        model: &CostModel,
        m: &CalibrationMeasurement,
        device: Device,
        host: HostIdentity,
    ) -> Result<Calibration> {
        if !m.baseline.plan.entries.is_empty() {
            return Err(ProfilerError::Invalid(format!(
                "a calibration's baseline must store everything; its plan has {} entries",
                m.baseline.plan.entries.len()
            )));
        }
        let mut fitted = model.clone();
        fitted.factors.clear();
        fitted.codecs.clear();
        fitted.calibrate(&m.baseline);
        let leaves = fitted.calibrate_recompute(&m.checkpointed);
        if leaves == 0 {
            return Err(ProfilerError::Invalid(
                "a calibration needs steps that recompute leaf modules: the checkpointed \
                 measurement recomputed none"
                    .into(),
            ));
        }
        fitted.calibrate_codecs(&m.codecs);
        let (fwd, bwd) = fitted.leaves_ms();
        let ratio = |outside: f64, inside: f64| if inside > 0.0 { outside / inside } else { 0.0 };
        let c = Calibration {
            format: CALIBRATION_FORMAT,
            device: device.to_string(),
            host,
            measured_on: MeasuredOn {
                workload: m.baseline.workload.clone(),
                warmup: m.baseline.warmup_runs,
                runs: m.baseline.runs,
                baseline_step_ms: m.baseline.step_ms,
                checkpointed_step_ms: m.checkpointed.step_ms,
                checkpointed_leaves: leaves,
                codec_shape: m.codecs.first().map(|c| c.shape.clone()).unwrap_or_default(),
            },
            throughput: fitted.throughput,
            backward_ratio: fitted.backward_ratio,
            overall: overall_factors(&fitted, m),
            factors: fitted.factors.clone(),
            forward_outside: ratio(fitted.forward_overhead_ms, fwd),
            backward_outside: ratio(fitted.backward_overhead_ms, bwd),
            optimizer_ms_per_byte: ratio(fitted.optimizer_update_ms(), fitted.param_bytes as f64),
            codecs: fitted.codecs.clone(),
            host_link: m.host_link.as_ref().and_then(CodecTiming::speed),
        };
        c.check()?;
        Ok(c)
    }
}

/// The paths `timing`'s plan checkpoints one by one (entries without a run of children).
fn recomputed_paths(timing: &TimingReport) -> Vec<String> {
    timing
        .plan
        .entries
        .iter()
        .filter(|e| e.policy.recomputes() && e.children.is_none())
        .map(|e| e.path.clone())
        .collect()
}

/// Measured over predicted time of all leaves together (forward and backward from the
/// baseline, recompute from the checkpointed leaves); 1 where nothing was measured.
fn overall_factors(model: &CostModel, m: &CalibrationMeasurement) -> TypeFactors {
    let recomputed = recomputed_paths(&m.checkpointed);
    let mut s = [0.0f64; 6];
    for e in model.modules.iter().filter(|e| e.leaf) {
        let raw = model.raw_forward_ms(e);
        s[0] += m.baseline.median_ms(&e.path, Phase::Forward);
        s[1] += raw;
        s[2] += m.baseline.median_ms(&e.path, Phase::Backward);
        s[3] += raw * model.backward_ratio;
        if recomputed.contains(&e.path) {
            s[4] += m.checkpointed.median_ms(&e.path, Phase::Recompute);
            s[5] += raw;
        }
    }
    let f = |measured: f64, predicted: f64| {
        if measured > 0.0 && predicted > 0.0 {
            measured / predicted
        } else {
            1.0
        }
    };
    TypeFactors {
        forward: f(s[0], s[1]),
        backward: f(s[2], s[3]),
        recompute_last: f(s[4], s[5]),
    }
}

impl CostModel {
    /// Fits each module type's [`TypeFactors::recompute_last`] to steps measured under a plan
    /// that checkpoints leaf modules one by one (each leaf then ends its own segment) (`timing.plan`; after [`CostModel::calibrate`] on a
    /// step storing everything): the factor makes the type's recomputed leaves' summed
    /// prediction equal their summed median `recompute` time. Types never recomputed keep the
    /// factor they had (the forward's, after `calibrate`). Returns how many leaves recomputed.
    pub fn calibrate_recompute(&mut self, timing: &TimingReport) -> usize {
        let recomputed = recomputed_paths(timing);
        let mut sums: BTreeMap<String, [f64; 2]> = BTreeMap::new();
        let mut leaves = 0;
        for e in self
            .modules
            .iter()
            .filter(|e| e.leaf && recomputed.contains(&e.path))
        {
            let Some(t) = timing.module(&e.path, Phase::Recompute) else {
                continue;
            };
            leaves += 1;
            let s = sums.entry(e.module_type.clone()).or_default();
            s[0] += t.median_ms;
            s[1] += self.raw_forward_ms(e);
        }
        for (ty, [measured, predicted]) in sums {
            if let (true, Some(f)) = (predicted > 0.0, self.factors.get_mut(&ty)) {
                f.recompute_last = measured / predicted;
            }
        }
        leaves
    }

    /// Sets the packing and unpacking speed of each timed compressor (bytes of the unpacked
    /// tensor over the median time); a timing too short for the clock to see is left out, so
    /// that compressor stays priced by bytes moved.
    pub fn calibrate_codecs(&mut self, codecs: &[CodecTiming]) {
        for c in codecs {
            if let Some(speed) = c.speed() {
                self.codecs.insert(c.compressor.name().to_string(), speed);
            }
        }
    }
}

impl CodecTiming {
    /// Bytes of the unpacked tensor over the median times; `None` for a timing too short for
    /// the clock to see.
    pub fn speed(&self) -> Option<CodecSpeed> {
        let bytes = self.input_bytes as f64;
        (self.compress_ms > 0.0 && self.decompress_ms > 0.0 && self.input_bytes > 0).then(|| CodecSpeed {
            compress_bytes_per_s: bytes / (self.compress_ms / 1e3),
            decompress_bytes_per_s: bytes / (self.decompress_ms / 1e3),
        })
    }
}
