//! memopt-profiler: where a training step's memory and time go, measured or computed.
//!
//! - [`profile_memory`] runs one step with a [`MemoryRecorder`] attached to a fresh tracker and
//!   reports, per module path and phase, bytes allocated, held at exit, the peak inside and the
//!   bytes saved for backward; the global peak with who holds it (by kind and by module); and
//!   the timeline, exportable as JSON and CSV.
//! - [`Estimator`] returns the same report, and the same peak to the byte, from a step on the
//!   Meta device, in milliseconds, for any plan (sparse compression aside: its sizes depend on
//!   the data, so Meta gives an upper bound).
//! - [`TimingProfiler`] measures per-module forward, backward and recompute wall time (median
//!   over runs, warm-up discarded), and [`CostModel`] predicts them from FLOPs and bytes,
//!   calibrated by a measurement when one is available.
//!
//! ```
//! use memopt_checkpoint::{Plan, Policy};
//! use memopt_core::Device;
//! use memopt_profiler::{Estimator, Workload, profile_memory};
//!
//! let workload = Workload::zoo_small("spiking-mlp", 2).unwrap();
//! let plan = Plan::from_entries([("1", Policy::CHECKPOINT)]);
//! let measured = profile_memory(&workload, &plan, Device::Cpu).unwrap();
//! let mut estimator = Estimator::new(&workload).unwrap();
//! assert_eq!(estimator.peak_bytes(&plan).unwrap(), measured.peak_bytes);
//! println!("{}", measured.table(5, false));
//! ```
#![warn(missing_docs)]

pub mod cost;
mod error;
mod estimator;
pub mod format;
pub mod memory;
mod scopes;
pub mod timing;
pub mod verify;
mod workload;

pub use cost::CostModel;
pub use error::{ProfilerError, Result};
pub use estimator::{Estimator, estimate};
pub use memory::{
    AllocatorFigures, AllocatorLevels, MemoryRecorder, MemoryReport, ModuleMemory, profile_memory,
};
pub use timing::{TimingProfiler, TimingReport};
pub use verify::{Mismatch, PlanCheck, Quantity, StepRecord, verify_plan};
pub use workload::{
    ModelBuilder, ModelSource, OptimizerChoice, PLANNED_STEP, StepSession, Workload, plan_is_data_dependent,
    random_batch,
};

// The types this crate's public signatures use, so that depending on memopt-profiler suffices.
pub use memopt_checkpoint::{InputSpec, Model, PLAN_VERSION, Plan, PlanEntry, Policy};
pub use memopt_compress::CompressorKind;
pub use memopt_core::{Device, MemoryKind, Phase};
