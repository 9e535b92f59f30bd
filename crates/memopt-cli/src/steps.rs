//! Real training steps: measured peak, gradient bits and step times of a plan.

use crate::error::Result;
use memopt_checkpoint::{Plan, StepOptions};
use memopt_core::{Device, MemoryTracker};
use memopt_profiler::Workload;
use memopt_profiler::timing::median;
use std::time::Instant;

/// What real steps of one plan measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRun {
    /// Peak bytes of the first step, parameters, optimizer state and batch included (the
    /// tracker's own figure, from a fresh tracker).
    pub peak_bytes: u64,
    /// Bits of every parameter gradient of the first step, in parameter order (empty on Meta).
    pub grad_bits: Vec<Vec<u32>>,
    /// Loss of the first step (`None` on Meta).
    pub loss: Option<f32>,
    /// Wall time of each timed step after the first, in ms.
    pub step_ms: Vec<f64>,
}

impl StepRun {
    /// Median time of the timed steps (the first step's when none was timed), in ms.
    pub fn median_step_ms(&self) -> f64 {
        median(&self.step_ms)
    }
}

/// Builds `workload` under `plan` on `device` in a fresh tracker, runs one step keeping the
/// gradients (peak and gradient bits), then `timed` more steps whose wall times are returned
/// (the first step's time when `timed` is 0). Fresh models with the same seeds give the same
/// first step under any plan, which is what makes gradients comparable across plans.
pub fn run_steps(workload: &Workload, plan: &Plan, device: Device, timed: usize) -> Result<StepRun> {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let session = workload.instantiate(device, plan)?;
    let (model, mut trainer, batch) = session.into_parts();
    let opts = StepOptions {
        keep_grads: true,
        ..StepOptions::default()
    };
    let t0 = Instant::now();
    let out = trainer.step(&model, &batch, opts)?;
    let first_ms = t0.elapsed().as_secs_f64() * 1e3;
    let peak_bytes = tracker.peak_bytes();
    let mut grad_bits = Vec::new();
    if let Some(grads) = &out.grads
        && !device.is_meta()
    {
        for (_, p) in model.params() {
            grad_bits.push(match grads.get(p.id()) {
                Some(g) => g.to_vec_f32()?.into_iter().map(f32::to_bits).collect(),
                None => Vec::new(),
            });
        }
    }
    let loss = out.loss;
    drop(out);
    let mut step_ms = Vec::with_capacity(timed);
    for _ in 0..timed {
        let t = Instant::now();
        trainer.step(&model, &batch, StepOptions::default())?;
        step_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if step_ms.is_empty() {
        step_ms.push(first_ms);
    }
    Ok(StepRun {
        peak_bytes,
        grad_bits,
        loss,
        step_ms,
    })
}
