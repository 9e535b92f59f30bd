//! `--calibration FILE`: predict times with a cost model calibrated on the device (a file made
//! by `memopt calibrate`) instead of the uncalibrated throughput guesses.
//!
//! There is no default location: `optimize` and `bench` read a calibration only when the flag
//! names one, so a plan (whose choices under `max-overhead` or a budget depend on predicted
//! times) follows from its command line alone, on any machine. A file measured on another
//! device, CPU, thread count or build is refused with what differs; a model with module types
//! the file never measured is priced at its overall factors, and the reports say which types.
//! `train` runs a plan it is given and predicts nothing, so it takes no calibration; a plan's
//! predicted overhead is `optimize`'s, with the calibration `optimize` was given.

use crate::error::{CliError, Result};
use crate::files::read_input;
use memopt_core::Device;
use memopt_profiler::cost::{Calibration, HostIdentity, Throughput};
use memopt_profiler::{CostModel, Workload};
use memopt_search::PlanningSession;
use memopt_search::builder::OptionSpace;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The cost model's calibration, shared by `optimize` and `bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CalibrationArgs {
    /// Predict times with a calibration measured on this device and host by `memopt calibrate
    /// -o FILE` [default: uncalibrated throughput guesses, which can be off by tens of points
    /// of overhead]. Refused when measured on another device, CPU, thread count or build.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
}

/// A calibration file, read and checked for the device planned for.
#[derive(Debug, Clone)]
pub struct LoadedCalibration {
    /// Where it was read from.
    pub path: PathBuf,
    /// What it holds.
    pub calibration: Calibration,
}

/// What predicted a report's times, for its JSON and text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModelSource {
    /// The calibration file (absent: the uncalibrated throughput guesses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<PathBuf>,
    /// The device, host and workload the calibration was measured on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<String>,
    /// Module types of this model that the calibration never measured, priced at its overall
    /// factors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured_types: Vec<String>,
}

impl CostModelSource {
    /// The report line: `cost model: calibrated by FILE (...)` or `cost model: uncalibrated ...`,
    /// and a second line naming unmeasured types when there are any.
    pub fn describe(&self) -> String {
        let mut s = match (&self.calibration, &self.measured_on) {
            (Some(path), Some(on)) => format!("cost model: calibrated by {} ({on})", path.display()),
            (Some(path), None) => format!("cost model: calibrated by {}", path.display()),
            _ => {
                let t = Throughput::cpu_default();
                format!(
                    "cost model: uncalibrated ({:.0} GFLOP/s, {:.0} GB/s guesses; \
                     `memopt calibrate -o FILE` measures this device, --calibration FILE uses it)",
                    t.flops_per_s / 1e9,
                    t.bytes_per_s / 1e9
                )
            }
        };
        if !self.unmeasured_types.is_empty() {
            s.push_str(&format!(
                "\nnote: the calibration never measured {}: priced at its overall factors \
                 (calibrate on this model to measure them)",
                self.unmeasured_types.join(", ")
            ));
        }
        s
    }
}

impl CalibrationArgs {
    /// The calibration file, read and checked for planning for `device` from this host, if one
    /// was given.
    pub fn load(&self, device: Device) -> Result<Option<LoadedCalibration>> {
        let Some(path) = &self.calibration else {
            return Ok(None);
        };
        let text = read_input(path, "calibration file")?;
        let calibration = Calibration::from_json(&text)
            .and_then(|c| {
                c.check_applies(device, &HostIdentity::this_process())?;
                Ok(c)
            })
            .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
        Ok(Some(LoadedCalibration {
            path: path.clone(),
            calibration,
        }))
    }
}

/// The cost model of `workload`, calibrated by `calibration` when given, and what it came from.
pub fn cost_model(
    workload: &Workload,
    calibration: Option<&LoadedCalibration>,
) -> Result<(CostModel, CostModelSource)> {
    let mut cost = CostModel::from_workload(workload, Throughput::cpu_default())?;
    let source = match calibration {
        None => CostModelSource {
            calibration: None,
            measured_on: None,
            unmeasured_types: Vec::new(),
        },
        Some(c) => CostModelSource {
            unmeasured_types: c.calibration.apply(&mut cost).unmeasured_types,
            calibration: Some(c.path.clone()),
            measured_on: Some(c.calibration.describe()),
        },
    };
    Ok((cost, source))
}

/// A planning session for `workload` over the options of `space`, whose cost model carries
/// `calibration` when given.
pub fn planning_session(
    workload: &Workload,
    calibration: Option<&LoadedCalibration>,
    space: OptionSpace,
) -> Result<(PlanningSession, CostModelSource)> {
    let (cost, source) = cost_model(workload, calibration)?;
    Ok((PlanningSession::with(workload, space, cost)?, source))
}
