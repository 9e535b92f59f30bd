//! `--calibration FILE`: plan with a cost model calibrated on the device (made by
//! `memopt calibrate`) instead of the default throughput guess.

use crate::error::{CliError, Result};
use crate::files::read_input;
use memopt_core::Device;
use memopt_profiler::cost::{Calibration, Throughput};
use memopt_profiler::{CostModel, Workload};
use memopt_search::PlanningSession;
use memopt_search::builder::OptionSpace;
use std::path::PathBuf;

/// The cost model's calibration, shared by `optimize` and `bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CalibrationArgs {
    /// Predict times with a calibration measured on this device by `memopt calibrate -o FILE`
    /// [default: uncalibrated throughput guesses, which can be off by several times].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
}

impl CalibrationArgs {
    /// The calibration file, read and checked, if one was given.
    pub fn load(&self) -> Result<Option<Calibration>> {
        let Some(path) = &self.calibration else {
            return Ok(None);
        };
        let text = read_input(path, "calibration file")?;
        Calibration::from_json(&text)
            .map(Some)
            .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))
    }

    /// A planning session for `workload` whose cost model carries the calibration (checked to
    /// be of the same kind of device as `device`).
    pub fn session(&self, workload: &Workload, device: Device) -> Result<PlanningSession> {
        let Some(calibration) = self.load()? else {
            return Ok(PlanningSession::new(workload)?);
        };
        let planned = device.to_string();
        if device_kind(&calibration.device) != device_kind(&planned) {
            return Err(CliError::Usage(format!(
                "the calibration was measured on {} but the plan is for {device}: measure one there \
                 with `memopt calibrate --device {device} -o FILE`",
                calibration.device
            )));
        }
        let mut cost = CostModel::from_workload(workload, Throughput::cpu_default())?;
        calibration.apply(&mut cost);
        Ok(PlanningSession::with(workload, OptionSpace::default(), cost)?)
    }
}

/// `cpu` or `cuda` of a device name (`cuda:1` -> `cuda`; Meta of a target -> the target).
fn device_kind(name: &str) -> &str {
    if name.contains("cuda") { "cuda" } else { "cpu" }
}
