//! Real training steps: the first step's record (peak, gradients, running statistics, neuron
//! states, updated parameters) and the wall times of further steps.

use crate::error::Result;
use memopt_checkpoint::Plan;
use memopt_core::Device;
use memopt_profiler::timing::median;
use memopt_profiler::{StepRecord, Workload};
use std::time::Instant;

/// What real steps of one plan measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRun {
    /// The first step, as the library's verification compares it.
    pub record: StepRecord,
    /// Wall time of each timed step after the first, in ms.
    pub step_ms: Vec<f64>,
}

impl StepRun {
    /// Peak bytes of the first step (a fresh tracker's figure).
    pub fn peak_bytes(&self) -> u64 {
        self.record.peak_bytes
    }

    /// Median time of the timed steps (the first step's when none was timed), in ms.
    pub fn median_step_ms(&self) -> f64 {
        median(&self.step_ms)
    }

    /// The fastest and slowest timed step, in ms.
    pub fn step_ms_range(&self) -> (f64, f64) {
        let min = self.step_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.step_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
}

/// Builds `workload` under `plan` on `device` in a fresh tracker and records its first step
/// ([`StepRecord::first_step`]), then runs `timed` more steps whose wall times are returned
/// (the first step's time when `timed` is 0).
pub fn run_steps(workload: &Workload, plan: &Plan, device: Device, timed: usize) -> Result<StepRun> {
    let (record, mut session) = StepRecord::first_step(workload, plan, device)?;
    let mut step_ms = Vec::with_capacity(timed.max(1));
    for _ in 0..timed {
        let t = Instant::now();
        session.step()?;
        step_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if step_ms.is_empty() {
        step_ms.push(record.step_ms);
    }
    Ok(StepRun { record, step_ms })
}
