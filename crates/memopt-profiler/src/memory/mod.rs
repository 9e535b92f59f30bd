//! The memory profiler: per module and phase figures, the peak and who holds it, the timeline.

mod allocator_figures;
mod kind_bytes;
mod profile;
pub(crate) mod recorder;
mod report;
mod table;

pub use allocator_figures::{AllocatorFigures, AllocatorLevels};
pub use kind_bytes::KindBytes;
pub use profile::{profile_memory, profile_session};
pub use recorder::MemoryRecorder;
pub use report::{Holder, MemoryReport, ModuleMemory, TimelinePoint};
