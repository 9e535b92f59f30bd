//! Measuring one step's memory.

use super::{MemoryRecorder, MemoryReport};
use crate::Result;
use crate::workload::{StepSession, Workload};
use memopt_checkpoint::Plan;
use memopt_core::{Device, MemoryTracker};

/// Runs one step of `workload` under `plan` on `device` with a fresh tracker installed before
/// anything is built, so the report covers the parameters, buffers, optimizer state and batch
/// as well as the step itself; the baseline is 0. The cache is emptied before the step (so
/// the step's reserved figures depend only on what is alive, as in the estimator). The session
/// is dropped after the report is taken.
pub fn profile_memory(workload: &Workload, plan: &Plan, device: Device) -> Result<MemoryReport> {
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let recorder = MemoryRecorder::start(&tracker);
    let mut session = workload.instantiate(device, plan)?;
    recorder.attribute_model(session.model());
    tracker.empty_cache();
    session.step()?;
    Ok(recorder.finish(workload.describe(), plan.clone()))
}

/// Runs one step of an existing session on the tracker current for its device; memory held
/// before (parameters, optimizer state, batch, anything else) is reported as the baseline and
/// attributed to `(before recording)`.
pub fn profile_session(session: &mut StepSession, workload: &str) -> Result<MemoryReport> {
    let tracker = MemoryTracker::current(session.model().device());
    let recorder = MemoryRecorder::start(&tracker);
    recorder.attribute_model(session.model());
    session.step()?;
    Ok(recorder.finish(workload, session.model().plan()))
}
