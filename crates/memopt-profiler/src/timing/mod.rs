//! The timing profiler: per-module forward, backward and recompute wall time, median over runs
//! after warm-up. CPU wall time for now; CUDA events once a GPU backend runs steps.

mod profiler;
mod recorder;
mod report;

pub use profiler::TimingProfiler;
pub use report::{ModuleTiming, TimingReport, median};
