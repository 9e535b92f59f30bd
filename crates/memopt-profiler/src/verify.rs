//! Checking a plan with real steps: a fresh model with the same seeds runs one training step
//! storing everything and one under the plan, and everything the step produces is compared bit
//! for bit, with the measured peak against the exact (Meta) peak. The peak is measured on a step
//! run with the options plans are made for ([`PLANNED_STEP`]: final neuron states released as
//! soon as nothing reads them); the final states, which such a step does not return, come from
//! the same first step run again on another fresh model keeping them.
//!
//! ```
//! use memopt_checkpoint::{Plan, Policy};
//! use memopt_core::Device;
//! use memopt_profiler::{Workload, verify_plan};
//!
//! let workload = Workload::zoo_small("spiking-mlp", 2).unwrap();
//! let plan = Plan::from_entries([("1", Policy::CHECKPOINT)]);
//! let check = verify_plan(&workload, &plan, Device::Cpu).unwrap();
//! assert!(check.passed(), "{}", check.summary());
//! ```

use crate::{
    AllocatorLevels, Estimator, PLANNED_STEP, ProfilerError, Result, StepSession, Workload,
    plan_is_data_dependent,
};
use memopt_checkpoint::{Plan, StepOptions};
use memopt_core::{Device, MemoryTracker, Tensor};
use serde::Serialize;
use std::fmt;

/// Everything one training step produced, as bits, in a fixed order.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// Peak bytes of the step run with the planned options ([`PLANNED_STEP`]; the gradients
    /// kept after the update, except under a plan updating in backward), parameters, optimizer state and batch included (a fresh
    /// tracker's own figure).
    pub peak_bytes: u64,
    /// Requested, allocated and reserved peaks of that step's tracker (its caching
    /// allocator's, as configured when the tracker was made), in bytes.
    pub allocator_peaks: AllocatorLevels,
    /// Peak bytes of the same first step keeping the final neuron states
    /// (`StepOptions::keep_states`), which it holds from each neuron's forward to the end of the
    /// step (a fresh tracker's own figure, on another fresh model). Under a plan updating in
    /// backward this step also keeps the gradients, which the other one then does not.
    pub peak_bytes_keeping_states: u64,
    /// Loss of the step.
    pub loss_bits: Option<u32>,
    /// Every parameter gradient, by parameter path (empty for a parameter without one).
    pub gradients: Vec<(String, Vec<u32>)>,
    /// Every buffer after the step (BatchNorm running statistics), by path.
    pub buffers: Vec<(String, Vec<u32>)>,
    /// Every neuron's final membrane state, by module path (from the step keeping them).
    pub neuron_states: Vec<(String, Vec<u32>)>,
    /// Every parameter after the optimizer's update, by path.
    pub parameters: Vec<(String, Vec<u32>)>,
    /// Wall time of the step with the planned options, in ms.
    pub step_ms: f64,
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_vec_f32()?.into_iter().map(f32::to_bits).collect())
}

impl StepRecord {
    /// Builds `workload` under `plan` on `device` (not Meta: it has no data) in a fresh tracker
    /// and records its first training step, run with the planned options ([`PLANNED_STEP`],
    /// keeping the gradients after the update, which leaves the peak as it is); then records
    /// the final neuron states from the same first step of another fresh model in its own
    /// tracker, keeping them (and, under a plan updating in backward, the gradients, which the
    /// first step then does not keep: holding them would raise its peak). Returns the first session too, so that the caller can run more
    /// steps (to time them, for instance). Fresh models with the same seeds give the same first
    /// step under any plan, which is what makes records comparable across plans.
    pub fn first_step(workload: &Workload, plan: &Plan, device: Device) -> Result<(StepRecord, StepSession)> {
        if device.is_meta() {
            return Err(ProfilerError::Invalid(
                "a step on the Meta device computes nothing to compare: record it on cpu".into(),
            ));
        }
        // Keeping the gradients leaves the peak as it is when they are held until the update
        // after backward anyway; under a plan updating in backward it would hold them, so the
        // step measuring the peak keeps none and the step keeping the states keeps them.
        let grads_in_states_step = plan.update_in_backward;
        let gradient_bits = |session: &StepSession, out: &memopt_checkpoint::StepOutput| -> Result<_> {
            let mut gradients = Vec::new();
            for (path, p) in session.model().params() {
                let g = match out.grads.as_ref().and_then(|g| g.get(p.id())) {
                    Some(g) => bits(g)?,
                    None => Vec::new(),
                };
                gradients.push((path, g));
            }
            Ok(gradients)
        };
        let (neuron_states, peak_bytes_keeping_states, states_step_gradients) = {
            let tracker = MemoryTracker::new(device);
            let _installed = MemoryTracker::install(tracker.clone());
            let mut session = workload.instantiate(device, plan)?;
            let out = session.step_with(StepOptions {
                keep_states: true,
                keep_grads: grads_in_states_step,
                ..PLANNED_STEP
            })?;
            let mut states = Vec::new();
            for (path, t) in &out.final_states {
                states.push((path.clone(), bits(t)?));
            }
            let gradients = gradient_bits(&session, &out)?;
            drop(out);
            (states, tracker.peak_bytes(), gradients)
        };
        let tracker = MemoryTracker::new(device);
        let _installed = MemoryTracker::install(tracker.clone());
        let mut session = workload.instantiate(device, plan)?;
        let opts = StepOptions {
            keep_grads: !grads_in_states_step,
            ..PLANNED_STEP
        };
        let started = std::time::Instant::now();
        let out = session.step_with(opts)?;
        let step_ms = started.elapsed().as_secs_f64() * 1e3;
        let peak_bytes = tracker.peak_bytes();
        let allocator_peaks = AllocatorLevels::peaks_of(&tracker);
        let gradients = if grads_in_states_step {
            states_step_gradients
        } else {
            gradient_bits(&session, &out)?
        };
        let model = session.model();
        let mut parameters = Vec::new();
        for (path, p) in model.params() {
            parameters.push((path, bits(p.tensor())?));
        }
        let mut buffers = Vec::new();
        for (path, b) in model.buffers() {
            buffers.push((path, bits(b.tensor())?));
        }
        let record = StepRecord {
            peak_bytes,
            allocator_peaks,
            peak_bytes_keeping_states,
            loss_bits: out.loss.map(f32::to_bits),
            gradients,
            buffers,
            neuron_states,
            parameters,
            step_ms,
        };
        drop(out);
        Ok((record, session))
    }
}

/// What a step produces that a plan must leave bit-identical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// The loss.
    Loss,
    /// A parameter gradient.
    Gradient,
    /// A buffer: BatchNorm running mean or variance.
    RunningStatistic,
    /// A neuron's final membrane state.
    NeuronState,
    /// A parameter after the optimizer's update.
    UpdatedParameter,
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantity::Loss => "loss",
            Quantity::Gradient => "gradient",
            Quantity::RunningStatistic => "running statistic",
            Quantity::NeuronState => "neuron state",
            Quantity::UpdatedParameter => "updated parameter",
        })
    }
}

/// One value that differs between the plan's step and the baseline's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// What kind of value.
    pub quantity: Quantity,
    /// Its path (parameter, buffer or module); empty for the loss.
    pub path: String,
}

/// The verdict of [`verify_plan`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanCheck {
    /// The plan's exact peak from a Meta step, in bytes (an upper bound when
    /// [`Self::data_dependent`]).
    pub planned_peak_bytes: u64,
    /// Peak of the real step under the plan, in bytes.
    pub measured_peak_bytes: u64,
    /// Peak of the real step storing everything, in bytes.
    pub baseline_measured_peak_bytes: u64,
    /// Whether the plan stores something whose size depends on the data (sparse compression),
    /// so that the measured peak only has to stay at or below the planned one.
    pub data_dependent: bool,
    /// Values compared (loss, gradients, running statistics, neuron states, parameters).
    pub compared: usize,
    /// Values that differ, in the order compared.
    pub mismatches: Vec<Mismatch>,
}

impl PlanCheck {
    /// Compares a plan's record with the baseline's; `planned_peak_bytes` is the plan's exact
    /// peak (from [`Estimator::peak_bytes`]).
    pub fn compare(
        baseline: &StepRecord,
        planned: &StepRecord,
        planned_peak_bytes: u64,
        data_dependent: bool,
    ) -> Self {
        let mut mismatches = Vec::new();
        let mut compared = 1;
        if baseline.loss_bits != planned.loss_bits {
            mismatches.push(Mismatch {
                quantity: Quantity::Loss,
                path: String::new(),
            });
        }
        let groups = [
            (Quantity::Gradient, &baseline.gradients, &planned.gradients),
            (Quantity::RunningStatistic, &baseline.buffers, &planned.buffers),
            (
                Quantity::NeuronState,
                &baseline.neuron_states,
                &planned.neuron_states,
            ),
            (
                Quantity::UpdatedParameter,
                &baseline.parameters,
                &planned.parameters,
            ),
        ];
        for (quantity, base, plan) in groups {
            compared += base.len().max(plan.len());
            for i in 0..base.len().max(plan.len()) {
                let (b, p) = (base.get(i), plan.get(i));
                if b != p {
                    let path = b.or(p).map(|(path, _)| path.clone()).unwrap_or_default();
                    mismatches.push(Mismatch { quantity, path });
                }
            }
        }
        PlanCheck {
            planned_peak_bytes,
            measured_peak_bytes: planned.peak_bytes,
            baseline_measured_peak_bytes: baseline.peak_bytes,
            data_dependent,
            compared,
            mismatches,
        }
    }

    /// Whether the measured peak is the planned one (at most it, for a data-dependent plan).
    pub fn peak_matches(&self) -> bool {
        if self.data_dependent {
            self.measured_peak_bytes <= self.planned_peak_bytes
        } else {
            self.measured_peak_bytes == self.planned_peak_bytes
        }
    }

    /// Whether every compared value is bit-identical to the baseline's.
    pub fn bit_identical(&self) -> bool {
        self.mismatches.is_empty()
    }

    /// Whether the plan passed: peak as planned and every value bit-identical.
    pub fn passed(&self) -> bool {
        self.peak_matches() && self.bit_identical()
    }

    /// Why the plan failed, in one line, or `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        if !self.peak_matches() {
            why.push(format!(
                "the measured peak is {} bytes but the plan's exact peak is {} bytes",
                self.measured_peak_bytes, self.planned_peak_bytes
            ));
        }
        if let Some(first) = self.mismatches.first() {
            let at = if first.path.is_empty() {
                String::new()
            } else {
                format!(" of {}", first.path)
            };
            why.push(format!(
                "{} of {} values differ from the baseline's (first: the {}{at})",
                self.mismatches.len(),
                self.compared,
                first.quantity
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// One line: the verdict and its figures.
    pub fn summary(&self) -> String {
        match self.failure() {
            Some(why) => format!("FAILED: {why}"),
            None => format!(
                "measured peak {} bytes = planned; {} values bit-identical",
                self.measured_peak_bytes, self.compared
            ),
        }
    }
}

/// Checks `plan` with real steps on `device`: one step storing everything and one under the
/// plan, each on a fresh model with the same seeds, compared bit for bit (loss, gradients,
/// BatchNorm running statistics, neuron states, updated parameters), and the measured peak of
/// the step run with the planned options ([`PLANNED_STEP`]) compared with the plan's exact
/// peak from a Meta step with the same options (see [`StepRecord::first_step`]).
pub fn verify_plan(workload: &Workload, plan: &Plan, device: Device) -> Result<PlanCheck> {
    let planned_peak = Estimator::new(workload)?.peak_bytes(plan)?;
    let (baseline, _) = StepRecord::first_step(workload, &Plan::store_all(), device)?;
    let (planned, _) = StepRecord::first_step(workload, plan, device)?;
    Ok(PlanCheck::compare(
        &baseline,
        &planned,
        planned_peak,
        plan_is_data_dependent(plan),
    ))
}
