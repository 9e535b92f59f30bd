//! A time cost model for planners: per-module FLOPs and bytes from a Meta step, turned into
//! forward, backward and recompute time with throughput constants, calibrated by the timing
//! profiler when a measurement is available.

mod calibration;
mod collect;
mod model;

pub use calibration::{CALIBRATION_FORMAT, Calibration, CalibrationRun};
pub use collect::{InputInfo, ModuleCostEntry};
pub use model::{CostModel, Throughput, TypeFactors};
