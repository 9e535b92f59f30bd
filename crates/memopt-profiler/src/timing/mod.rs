//! The timing profiler: per-module forward, backward and recompute time, median over runs after
//! warm-up: host wall time on the CPU, GPU time from CUDA events on a GPU (recorded on the
//! GPU's stream at every scope transition, read back once the step's work is done).

mod codec;
mod profiler;
mod recorder;
mod report;

pub use codec::CodecTiming;
pub use profiler::TimingProfiler;
pub use report::{ModuleTiming, TimingReport, median, quartiles};
