//! A time cost model for planners: per-module FLOPs and bytes from a Meta step, turned into
//! forward, backward and recompute time with throughput constants, calibrated per device by
//! the timing profiler (a [`Calibration`] file, measured by [`Calibration::measure`]).

mod calibration;
mod collect;
mod fit;
mod host_link;
mod model;
mod recompute;

pub use calibration::{Applied, CALIBRATION_FORMAT, Calibration, HostIdentity, MeasuredOn};
pub use collect::{InputInfo, ModuleCostEntry};
pub use fit::{
    CalibrationMeasurement, CalibrationRun, TIMED_CODECS, every_leaf_checkpointed, largest_input,
    largest_spike_input,
};
pub use host_link::GPU_MEMORY_OVER_HOST_LINK;
pub use model::{CodecSpeed, CostModel, Throughput, TypeFactors};
