//! The memory report of one step: global peak and who holds it, per-module figures, timeline.

use super::{AllocatorFigures, KindBytes};
use crate::Result;
use crate::error::ProfilerError;
use memopt_checkpoint::Plan;
use memopt_core::{Device, Phase};
use serde::{Deserialize, Serialize};

/// Memory figures of one module in one phase. A parent's figures include its children's (an
/// allocation made inside `features.3.neuron` counts for `features.3`, `features` and the root
/// too), and every (path, phase) pair keeps its own counters, so nesting never corrupts them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMemory {
    /// Module path (`""` for the root).
    pub path: String,
    /// Module type (`Conv2d`, `Sequential`, ...; empty when unknown).
    pub module_type: String,
    /// Phase.
    pub phase: Phase,
    /// Number of separate stretches of time spent in the module in this phase (calls, time
    /// chunks, backward nodes).
    pub visits: u64,
    /// Bytes allocated inside the module (children included).
    pub allocated_bytes: u64,
    /// Bytes allocated by the module itself, outside any child module.
    pub self_allocated_bytes: u64,
    /// Bytes allocated inside the module and still held when it was left, summed over visits
    /// (its outputs, what it saved for backward, gradients it produced).
    pub held_at_exit_bytes: u64,
    /// Most bytes held on the device (all kinds, absolute) at any moment inside the module.
    pub peak_bytes: u64,
    /// Bytes the module kept for backward (re-tagged or allocated as saved-for-backward
    /// inside it).
    pub saved_bytes: u64,
    /// Bytes of compressed payloads allocated inside it.
    pub packed_bytes: u64,
}

/// What one module holds at the moment of the peak. Memory is attributed to the module whose
/// scope allocated it; parameters and buffers to the module that owns them; optimizer state,
/// inputs and anything allocated outside any module to the root (`""`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Module path (`""` for the root; `"(before recording)"` for memory that was held before
    /// the recorder started).
    pub path: String,
    /// Bytes held at the peak.
    pub bytes: u64,
    /// The same bytes by kind.
    pub by_kind: KindBytes,
}

/// The device's bytes after one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Index of the event since the recording started (the tracker's sequence number when it
    /// was recorded from the tracker's creation).
    pub event: u64,
    /// Nanoseconds since the tracker was created.
    pub time_ns: u64,
    /// Bytes held on the device after the event.
    pub current_bytes: u64,
}

/// The memory report of a step. Serialises to JSON with stable field names (`peak_bytes`,
/// `by_kind`, `modules`, `timeline`, ...); the timeline also exports as CSV.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReport {
    /// What was run (model, input, optimizer).
    pub workload: String,
    /// Device measured (or `meta` for an estimate).
    pub device: Device,
    /// The plan in force.
    pub plan: Plan,
    /// Whether the plan stores data-dependent sizes (sparse compression): a Meta estimate is
    /// then an upper bound of the measured figures rather than equal to them.
    pub data_dependent_sizes: bool,
    /// Bytes held when the recording started (0 when the tracker was fresh).
    pub baseline_bytes: u64,
    /// Most bytes held at once, parameters, buffers, optimizer state and inputs included.
    pub peak_bytes: u64,
    /// Index of the event that first reached the peak (`None` if nothing rose above the
    /// baseline).
    pub peak_event: Option<u64>,
    /// Module path where the peak was reached.
    pub peak_path: String,
    /// Phase in which the peak was reached.
    pub peak_phase: Phase,
    /// Bytes per kind at the peak (they sum to `peak_bytes`).
    pub by_kind: KindBytes,
    /// Requested, allocated and reserved peaks of the device's caching allocator, and the
    /// fragmentation (reserved - allocated) at the reserved peak.
    #[serde(default)]
    pub allocator: AllocatorFigures,
    /// Who holds memory at the peak, largest first (they sum to `peak_bytes`).
    pub holders: Vec<Holder>,
    /// Bytes held when the recording ended.
    pub final_bytes: u64,
    /// Bytes allocated during the recording.
    pub total_allocated_bytes: u64,
    /// Figures per module and phase, in order of first appearance (parents before children).
    pub modules: Vec<ModuleMemory>,
    /// Bytes held after every event.
    pub timeline: Vec<TimelinePoint>,
}

impl MemoryReport {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        // Every field is a plain number, string, enum or vector: serialisation cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses a report written by [`MemoryReport::to_json`].
    pub fn from_json(s: &str) -> Result<MemoryReport> {
        serde_json::from_str(s).map_err(|e| ProfilerError::Invalid(format!("not a memory report: {e}")))
    }

    /// The timeline as CSV: a header `event,time_ns,current_bytes` and one line per event.
    pub fn timeline_csv(&self) -> String {
        let mut out = String::with_capacity(32 * (self.timeline.len() + 1));
        out.push_str("event,time_ns,current_bytes\n");
        for p in &self.timeline {
            out.push_str(&format!("{},{},{}\n", p.event, p.time_ns, p.current_bytes));
        }
        out
    }

    /// The figures of `path` in `phase`.
    pub fn module(&self, path: &str, phase: Phase) -> Option<&ModuleMemory> {
        self.modules.iter().find(|m| m.path == path && m.phase == phase)
    }

    /// The `k` modules holding the most memory at the peak, largest first, leaving out the root
    /// (optimizer state, inputs, loss) and memory held before the recording.
    pub fn top_modules(&self, k: usize) -> Vec<&Holder> {
        self.holders
            .iter()
            .filter(|h| !h.path.is_empty() && h.path != super::recorder::BEFORE_RECORDING)
            .take(k)
            .collect()
    }
}
