//! A calibration: how fast one device runs each module type, measured by the timing profiler,
//! saved as a file and applied to the cost model of any workload on that device.
//!
//! Measuring takes two timed runs of the workload on the device: one storing everything (each
//! leaf type's forward and backward time against its FLOPs and bytes, the time outside modules,
//! the optimizer), then one that checkpoints every leaf module with bit-packed spike inputs
//! (each type's recomputation, and what saving and restoring inputs costs per byte). Everything
//! it keeps is a ratio (measured over predicted, outside over inside, milliseconds per byte), so
//! a calibration made on one model predicts another on the same device.

use super::model::{CostModel, Throughput, TypeFactors};
use crate::Result;
use crate::error::ProfilerError;
use crate::timing::{TimingProfiler, TimingReport};
use crate::workload::Workload;
use memopt_checkpoint::{Plan, Policy};
use memopt_core::{Device, Phase};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The calibration file format this build reads and writes.
pub const CALIBRATION_FORMAT: u32 = 1;

/// Per-device time factors, transferable across workloads on that device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// File format version ([`CALIBRATION_FORMAT`]).
    pub format: u32,
    /// The device measured (`cpu`, `cuda:0`).
    pub device: String,
    /// Worker threads of the CPU kernels when measured (CPU only; timings depend on it).
    pub threads: usize,
    /// The workload the measurement ran (for the record).
    pub measured_on: String,
    /// The throughput constants the factors multiply.
    pub throughput: Throughput,
    /// Backward over forward time the factors multiply.
    pub backward_ratio: f64,
    /// Measured over predicted time, per module type.
    pub factors: BTreeMap<String, TypeFactors>,
    /// Forward time outside leaf modules (loss, glue) over the leaves' forward time.
    pub forward_outside: f64,
    /// Backward time outside leaf modules over the leaves' backward time.
    pub backward_outside: f64,
    /// Optimizer update time per parameter byte, in milliseconds per byte.
    pub optimizer_ms_per_byte: f64,
    /// Bytes per second at which saved inputs are compressed, copied and restored (`None`:
    /// the throughput's `bytes_per_s`, when the measurement could not separate it).
    pub saved_input_bytes_per_s: Option<f64>,
}

/// A calibration with the measurements it came from.
#[derive(Debug, Clone)]
pub struct CalibrationRun {
    /// The fitted calibration.
    pub calibration: Calibration,
    /// The step storing everything.
    pub baseline: TimingReport,
    /// The step checkpointing every leaf.
    pub checkpointed: TimingReport,
    /// The plan of the second step (every leaf checkpointed).
    pub plan: Plan,
}

impl Calibration {
    /// Times `workload` on `device` (two profiled runs, see the module documentation) and fits
    /// a calibration.
    pub fn measure(workload: &Workload, device: Device, profiler: TimingProfiler) -> Result<CalibrationRun> {
        let mut model = CostModel::from_workload(workload, Throughput::cpu_default())?;
        let baseline = profiler.profile(workload, &Plan::store_all(), device)?;
        model.calibrate(&baseline);
        let plan = every_leaf_checkpointed(&model);
        let checkpointed = profiler.profile(workload, &plan, device)?;
        model.calibrate_recompute(&checkpointed, &plan);
        let calibration = model.calibration(device, workload.describe())?;
        Ok(CalibrationRun {
            calibration,
            baseline,
            checkpointed,
            plan,
        })
    }

    /// Parses a calibration file: strict JSON (repeated or unknown keys are errors), the format
    /// this build writes, and finite positive factors.
    pub fn from_json(text: &str) -> Result<Calibration> {
        let c: Calibration = memopt_checkpoint::strict_json::from_str(text)
            .map_err(|e| ProfilerError::Invalid(format!("not a calibration file: {e}")))?;
        if c.format != CALIBRATION_FORMAT {
            return Err(ProfilerError::Invalid(format!(
                "calibration format {} is not supported: this build reads format {CALIBRATION_FORMAT}; \
                 measure again with `memopt calibrate`",
                c.format
            )));
        }
        c.check()?;
        Ok(c)
    }

    /// The calibration as pretty JSON.
    pub fn to_json(&self) -> String {
        // Numbers, strings and maps of them: serialisation cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    fn check(&self) -> Result<()> {
        let positive = |what: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ProfilerError::Invalid(format!(
                    "calibration: {what} is {v}; it must be a finite number above 0"
                )))
            }
        };
        let non_negative = |what: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(ProfilerError::Invalid(format!(
                    "calibration: {what} is {v}; it must be a finite number, 0 or above"
                )))
            }
        };
        positive("throughput.flops_per_s", self.throughput.flops_per_s)?;
        positive("throughput.bytes_per_s", self.throughput.bytes_per_s)?;
        positive("backward_ratio", self.backward_ratio)?;
        for (ty, f) in &self.factors {
            positive(&format!("factors.{ty}.forward"), f.forward)?;
            positive(&format!("factors.{ty}.backward"), f.backward)?;
            positive(&format!("factors.{ty}.recompute"), f.recompute)?;
        }
        non_negative("forward_outside", self.forward_outside)?;
        non_negative("backward_outside", self.backward_outside)?;
        non_negative("optimizer_ms_per_byte", self.optimizer_ms_per_byte)?;
        if let Some(b) = self.saved_input_bytes_per_s {
            positive("saved_input_bytes_per_s", b)?;
        }
        Ok(())
    }

    /// Applies the calibration to `model` (a model of any workload): its throughput, factors,
    /// time outside modules and optimizer time. Types the calibration never measured keep
    /// factor 1.
    pub fn apply(&self, model: &mut CostModel) {
        model.throughput = self.throughput;
        model.backward_ratio = self.backward_ratio;
        model.factors = self.factors.clone();
        let (fwd, bwd) = model.leaves_ms();
        model.forward_overhead_ms = self.forward_outside * fwd;
        model.backward_overhead_ms = self.backward_outside * bwd;
        model.optimizer_ms = Some(self.optimizer_ms_per_byte * model.param_bytes as f64);
        model.saved_input_bytes_per_s = self.saved_input_bytes_per_s;
    }
}

/// The plan checkpointing every leaf module (bit-packed where the input is spikes).
fn every_leaf_checkpointed(model: &CostModel) -> Plan {
    Plan::from_entries(
        model
            .modules
            .iter()
            .filter(|m| m.leaf && !m.path.is_empty())
            .map(|m| (m.path.clone(), Policy::CHECKPOINT)),
    )
}

impl CostModel {
    /// Fits each type's recompute factor and the saved-input throughput to a step measured
    /// under `plan` (after [`CostModel::calibrate`] on a step storing everything): a type's
    /// recompute factor makes its recomputing leaves' summed prediction equal their summed
    /// median recompute time; what the step took beyond the baseline prediction and the
    /// measured recomputation is the saved inputs' traffic.
    pub fn calibrate_recompute(&mut self, timing: &TimingReport, plan: &Plan) {
        let recomputed: Vec<String> = plan
            .entries
            .iter()
            .filter(|e| e.policy.recomputes() && e.children.is_none())
            .map(|e| e.path.clone())
            .collect();
        let mut sums: BTreeMap<String, [f64; 2]> = BTreeMap::new();
        for e in self.modules.iter().filter(|e| e.leaf && recomputed.contains(&e.path)) {
            let s = sums.entry(e.module_type.clone()).or_default();
            s[0] += timing.median_ms(&e.path, Phase::Recompute);
            s[1] += self.raw_forward_ms(e);
        }
        for (ty, [measured, predicted]) in sums {
            if measured > 0.0 && predicted > 0.0 {
                self.factors.entry(ty).or_default().recompute = measured / predicted;
            }
        }
        let recompute_ms: f64 = timing
            .modules
            .iter()
            .filter(|m| m.phase == Phase::Recompute && recomputed.contains(&m.path))
            .map(|m| m.median_ms)
            .sum();
        let traffic = self.plan_saved_input_bytes(plan);
        let rest_ms = timing.step_ms - self.baseline_step_ms() - recompute_ms;
        self.saved_input_bytes_per_s = if traffic > 0 && rest_ms > 0.0 {
            Some(traffic as f64 / (rest_ms / 1e3))
        } else {
            None
        };
    }

    /// The calibration this model carries, for `device`.
    pub fn calibration(&self, device: Device, measured_on: String) -> Result<Calibration> {
        let (fwd, bwd) = self.leaves_ms();
        let ratio = |outside: f64, inside: f64| if inside > 0.0 { outside / inside } else { 0.0 };
        let c = Calibration {
            format: CALIBRATION_FORMAT,
            device: device.to_string(),
            threads: rayon::current_num_threads(),
            measured_on,
            throughput: self.throughput,
            backward_ratio: self.backward_ratio,
            factors: self.factors.clone(),
            forward_outside: ratio(self.forward_overhead_ms, fwd),
            backward_outside: ratio(self.backward_overhead_ms, bwd),
            optimizer_ms_per_byte: ratio(self.optimizer_update_ms(), self.param_bytes as f64),
            saved_input_bytes_per_s: self.saved_input_bytes_per_s,
        };
        c.check()?;
        Ok(c)
    }
}
