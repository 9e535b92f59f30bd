//! The memory of a whole training run on a dataset: its epochs replayed on Meta with the
//! device's target before the first step (every step, the batches on the device, the smaller
//! last batch, the evaluation), printed, and refused when it does not fit the device.

use crate::error::{CliError, Result};
use crate::format::bytes;
use crate::memory_limit::{MemoryLimitArgs, gpu_room};
use memopt_checkpoint::{Model, Trainer};
use memopt_core::{Device, MemoryTracker, Target};
use memopt_data::Dataset;
use memopt_data::training::{EpochMetrics, EpochPlan, StepDone, run_epoch};
use memopt_profiler::AllocatorLevels;
use std::sync::Arc;

/// The epochs of one run: data, splits and settings.
pub struct Epochs<'a> {
    /// The dataset.
    pub data: &'a Arc<Dataset>,
    /// Indices of the training split.
    pub train: &'a [usize],
    /// Indices of the test split.
    pub test: &'a [usize],
    /// Settings fixed over the epochs.
    pub plan: EpochPlan,
    /// The epochs to run (0-based).
    pub range: std::ops::Range<u64>,
}

impl Epochs<'_> {
    /// Runs epoch `epoch` on `model`, calling `on_step` after each step.
    fn epoch(
        &self,
        model: &Model,
        trainer: &mut Trainer,
        epoch: u64,
        on_step: &mut dyn FnMut(&StepDone),
    ) -> Result<EpochMetrics> {
        Ok(run_epoch(
            model, trainer, self.data, self.train, self.test, &self.plan, epoch, on_step,
        )?)
    }

    /// Runs every epoch on `model`, calling `on_step(epoch, step)` after each step and
    /// `on_epoch` after each epoch.
    pub fn run(
        &self,
        model: &Model,
        trainer: &mut Trainer,
        on_step: &mut dyn FnMut(u64, &StepDone),
        on_epoch: &mut dyn FnMut(&EpochMetrics, &Trainer) -> Result<()>,
    ) -> Result<()> {
        for epoch in self.range.clone() {
            let m = self.epoch(model, trainer, epoch, &mut |step| on_step(epoch, step))?;
            on_epoch(&m, trainer)?;
        }
        Ok(())
    }
}

/// What replaying a run on Meta found.
pub struct Replay {
    /// The run's requested, allocated and reserved peaks, in bytes.
    pub peaks: AllocatorLevels,
    /// Epochs replayed; the rest repeat the last one's allocations from the same layout.
    pub epochs: u64,
}

/// The exact peaks of the whole run on `target`: its epochs replayed on Meta (the model and
/// optimizer state, the batches on the device, those uploading ahead, the smaller last batch
/// and the evaluation), under this process's allocator configuration. Allocations depend on
/// shapes only, so an epoch that ends with the allocator's layout and held bytes as the one
/// before it did starts the next epoch as that one started: every later epoch repeats it, and
/// the replay stops there. `build` makes the model and trainer on a device, as the run does.
pub fn replay_on_meta(
    target: Target,
    epochs: &Epochs<'_>,
    build: impl FnOnce(Device) -> Result<(Model, Trainer)>,
) -> Result<Replay> {
    let device = Device::Meta(target);
    let tracker = MemoryTracker::new(device);
    let _installed = MemoryTracker::install(tracker.clone());
    let (model, mut trainer) = build(device)?;
    let mut before = None;
    let mut replayed = 0;
    for epoch in epochs.range.clone() {
        epochs.epoch(&model, &mut trainer, epoch, &mut |_| {})?;
        replayed += 1;
        let after = (tracker.current_bytes(), tracker.allocator_layout());
        if before.as_ref() == Some(&after) {
            break;
        }
        before = Some(after);
    }
    Ok(Replay {
        peaks: AllocatorLevels::peaks_of(&tracker),
        epochs: replayed,
    })
}

/// How much of the run's epochs `range` a replay ran, in words (epochs counted from 1).
pub fn replayed_text(replay: &Replay, range: &std::ops::Range<u64>) -> String {
    let epochs = range.end - range.start;
    if replay.epochs == epochs {
        format!("every epoch replayed on Meta ({epochs})")
    } else {
        format!(
            "{} of {epochs} epochs replayed on Meta: the allocator's layout repeats after epoch {}, so \
             the later epochs repeat its peaks",
            replay.epochs,
            range.start + replay.epochs
        )
    }
}

/// Refuses a run whose exact reserved peak exceeds the room on its device: the room left now
/// plus `held`, the bytes the run's tracker reserves already (the model and optimizer state,
/// which the replayed peak counts too).
pub fn refuse_unless_run_fits(
    limit: &MemoryLimitArgs,
    device: Device,
    run: &AllocatorLevels,
    step_peak: u64,
    held: u64,
) -> Result<()> {
    if limit.ignore_memory_limit {
        return Ok(());
    }
    let room = match device {
        Device::Cpu => limit.room()?,
        Device::Cuda(ordinal) => Some(gpu_room(ordinal)?),
        Device::Meta(_) => None,
    };
    match room {
        Some(room) if run.reserved_bytes > room.bytes.saturating_add(held) => {
            Err(CliError::Invalid(format!(
                "the training run reserves {} ({} bytes) at its peak on {device} (a step alone {}; the \
             batches on the device, the last smaller batch and the evaluation included), but only {} \
             ({} bytes; {}) is free besides the {held} bytes the model holds already: lower --batch \
             or train under a plan from `memopt optimize --budget`; --ignore-memory-limit runs anyway",
                bytes(run.reserved_bytes),
                run.reserved_bytes,
                bytes(step_peak),
                bytes(room.bytes),
                room.bytes,
                room.source
            )))
        }
        _ => Ok(()),
    }
}

/// One line of the run's peaks.
pub fn peaks_line(p: &AllocatorLevels) -> String {
    format!(
        "{} reserved ({} bytes), {} allocated, {} requested ({} bytes)",
        bytes(p.reserved_bytes),
        p.reserved_bytes,
        bytes(p.allocated_bytes),
        bytes(p.requested_bytes),
        p.requested_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn limit(size: &str) -> MemoryLimitArgs {
        MemoryLimitArgs {
            memory_limit: Some(size.into()),
            ignore_memory_limit: false,
        }
    }

    /// The run's reserved peak is compared with the room plus what the run holds already.
    #[test]
    fn a_run_is_refused_when_its_peak_exceeds_the_room_and_what_it_holds() {
        let run = AllocatorLevels {
            requested_bytes: 9 * MIB,
            allocated_bytes: 9 * MIB,
            reserved_bytes: 10 * MIB,
        };
        let e = refuse_unless_run_fits(&limit("8MiB"), Device::Cpu, &run, 8 * MIB, MIB)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reserves 10.00 MiB (10485760 bytes)")
                && e.contains("a step alone 8.00 MiB")
                && e.contains("--memory-limit 8MiB")
                && e.contains("1048576 bytes the model holds already"),
            "{e}"
        );
        refuse_unless_run_fits(&limit("9MiB"), Device::Cpu, &run, 8 * MIB, MIB).unwrap();
        let mut ignore = limit("1MiB");
        ignore.ignore_memory_limit = true;
        refuse_unless_run_fits(&ignore, Device::Cpu, &run, 8 * MIB, MIB).unwrap();
        refuse_unless_run_fits(&limit("1MiB"), Device::META, &run, 8 * MIB, 0).unwrap();
    }
}
