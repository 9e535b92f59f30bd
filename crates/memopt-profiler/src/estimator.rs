//! The estimator: the memory report of a step computed on the Meta device, without data.

use crate::Result;
use crate::error::ProfilerError;
use crate::memory::recorder::RecorderState;
use crate::memory::{AllocatorLevels, MemoryRecorder, MemoryReport};
use crate::workload::{StepSession, Workload};
use memopt_checkpoint::Plan;
use memopt_core::{Device, MemoryTracker};
use std::sync::Arc;

/// Estimates a workload's step memory for any plan by running the step on the Meta device,
/// where kernels allocate exactly as on the CPU but compute nothing.
///
/// The model, optimizer state and batch are built once, on Meta, in the estimator's own
/// tracker, and kept: each estimate only applies the plan and runs one Meta step. Its peak
/// equals the peak [`crate::profile_memory`] measures on the CPU to the byte, for every plan
/// whose sizes do not depend on data. Sparse compression is the exception: its payload depends
/// on the number of spikes, and Meta allocates the worst case, so the estimate is then an upper
/// bound (reports say so in `data_dependent_sizes`).
pub struct Estimator {
    workload: Workload,
    tracker: Arc<MemoryTracker>,
    session: StepSession,
    setup: RecorderState,
    setup_peaks: AllocatorLevels,
    baseline: u64,
    /// Where offloaded tensors go when the host is separate from the device (Meta of the CPU
    /// for Meta of a GPU): a tracker of its own, whose peak each step reports.
    host: Option<Arc<MemoryTracker>>,
    host_peak: u64,
}

impl Estimator {
    /// Builds `workload` on Meta in a fresh tracker.
    pub fn new(workload: &Workload) -> Result<Estimator> {
        let tracker = MemoryTracker::new(workload.meta_device());
        let _installed = MemoryTracker::install(tracker.clone());
        let recorder = MemoryRecorder::start(&tracker);
        let session = workload.instantiate(workload.meta_device(), &Plan::store_all())?;
        recorder.attribute_model(session.model());
        let setup = recorder.snapshot();
        drop(recorder);
        let device = workload.meta_device();
        Ok(Estimator {
            workload: workload.clone(),
            setup_peaks: AllocatorLevels::peaks_of(&tracker),
            baseline: tracker.current_bytes(),
            tracker,
            session,
            setup,
            // Only the host's requested peak is read: a counting tracker (Meta of the CPU).
            host: match device.host() {
                Device::Meta(target) if device.has_separate_host() => Some(MemoryTracker::counting(target)),
                _ => None,
            },
            host_peak: 0,
        })
    }

    /// The workload estimated.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// Bytes held between steps: parameters, buffers, optimizer state and the batch.
    pub fn persistent_bytes(&self) -> u64 {
        self.baseline
    }

    /// The exact peak of one step under `plan`, in requested bytes, persistent state
    /// included. The fast path for planners: nothing but the tracker's counters is recorded.
    pub fn peak_bytes(&mut self, plan: &Plan) -> Result<u64> {
        Ok(self.peaks(plan)?.requested_bytes)
    }

    /// The exact requested, allocated and reserved peaks of one step under `plan`, in bytes,
    /// setup included; the step starts from an emptied cache, as [`crate::profile_memory`]'s
    /// does, so the reserved peak equals the CPU's.
    pub fn peaks(&mut self, plan: &Plan) -> Result<AllocatorLevels> {
        let _installed = MemoryTracker::install(self.tracker.clone());
        let _host = self.install_host();
        self.session.apply_plan(plan)?;
        self.tracker.empty_cache();
        self.tracker.reset_peak();
        self.session.step()?;
        self.host_peak = self.host.as_ref().map_or(0, |h| h.peak_bytes());
        self.check_no_leak()?;
        let step = AllocatorLevels::peaks_of(&self.tracker);
        Ok(AllocatorLevels {
            requested_bytes: self.setup_peaks.requested_bytes.max(step.requested_bytes),
            allocated_bytes: self.setup_peaks.allocated_bytes.max(step.allocated_bytes),
            reserved_bytes: self.setup_peaks.reserved_bytes.max(step.reserved_bytes),
        })
    }

    /// [`Self::peaks`] on a device whose caching allocator may hold at most `limit` bytes in
    /// segments ([`MemoryTracker::set_reserve_limit`]: at the limit it releases its cached
    /// segments and retries, as PyTorch's does on a full device). `Ok(None)` when the step does
    /// not fit the limit; the estimator stays usable either way.
    pub fn peaks_within(&mut self, plan: &Plan, limit: u64) -> Result<Option<AllocatorLevels>> {
        self.tracker.set_reserve_limit(Some(limit));
        let peaks = self.peaks(plan);
        self.tracker.set_reserve_limit(None);
        match peaks {
            // The setup (parameters, optimizer state, batch) ran without the limit: a setup
            // that reserved more than the limit does not fit either.
            Ok(levels) => Ok((levels.reserved_bytes <= limit).then_some(levels)),
            Err(e) if e.is_out_of_memory() => {
                self.tracker.empty_cache();
                self.check_no_leak()?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The full memory report of one step under `plan`: the same report
    /// [`crate::profile_memory`] gives on the CPU (times aside), computed on Meta.
    pub fn report(&mut self, plan: &Plan) -> Result<MemoryReport> {
        let _installed = MemoryTracker::install(self.tracker.clone());
        let _host = self.install_host();
        self.session.apply_plan(plan)?;
        self.tracker.empty_cache();
        let recorder = MemoryRecorder::resume(&self.tracker, self.setup.clone());
        self.session.step()?;
        self.host_peak = self.host.as_ref().map_or(0, |h| h.peak_bytes());
        let report = recorder.finish(self.workload.describe(), plan.clone());
        self.check_no_leak()?;
        Ok(report)
    }

    /// Bytes the last step ([`Self::peaks`], [`Self::report`]) held at most in host memory for
    /// offloaded payloads and boundary states, where the host is separate from the device (a
    /// GPU target); 0 where the host is the device, whose figures hold them.
    pub fn host_peak_bytes(&self) -> u64 {
        self.host_peak
    }

    /// Installs the host tracker with its peak reset, where the host is separate.
    fn install_host(&self) -> Option<memopt_core::memory::TrackerGuard> {
        self.host.as_ref().map(|h| {
            h.reset_peak();
            MemoryTracker::install(h.clone())
        })
    }

    fn check_no_leak(&self) -> Result<()> {
        let after = self.tracker.current_bytes();
        if after != self.baseline {
            return Err(ProfilerError::Leak {
                before: self.baseline,
                after,
            });
        }
        Ok(())
    }
}

/// One-off estimate: builds an [`Estimator`] and reports one step under `plan`.
pub fn estimate(workload: &Workload, plan: &Plan) -> Result<MemoryReport> {
    Estimator::new(workload)?.report(plan)
}
