//! What a strategy returns, and which of its peaks a budget bounds.

use memopt_checkpoint::Plan;
use memopt_profiler::AllocatorLevels;
use serde::{Deserialize, Serialize};

/// A plan with its verified figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Model name.
    pub model: String,
    /// Batch size N.
    pub batch: usize,
    /// Time steps T.
    pub timesteps: usize,
    /// Strategy that produced the plan.
    pub strategy: String,
    /// Requested peak of a step storing everything, in bytes (exact): what tensors asked for.
    pub baseline_peak_bytes: u64,
    /// Requested peak of a step under the plan, in bytes (exact: a Meta step); the figure a
    /// real step's verification compares with.
    pub planned_peak_bytes: u64,
    /// Requested, allocated and reserved peaks of a step storing everything, in bytes (exact).
    pub baseline_peaks: AllocatorLevels,
    /// Requested, allocated and reserved peaks of a step under the plan, in bytes (exact: a
    /// Meta step replaying the caching allocator). Reserved is what runs out on a device.
    pub planned_peaks: AllocatorLevels,
    /// Peak bytes the step holds in host memory for offloaded payloads and boundary states
    /// (exact: the Meta step's host tracker), where the host is separate from the device (a
    /// GPU target); 0 otherwise, and in reports saved before it was recorded.
    #[serde(default)]
    pub host_peak_bytes: u64,
    /// The budget the plan was chosen to fit, when the strategy had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetFit>,
    /// Predicted extra time as a fraction of the baseline step time (0.18 = 18% slower).
    pub predicted_overhead: f64,
    /// Time the strategy took, in ms (the session's setup excluded).
    pub planning_ms: f64,
    /// The plan.
    pub plan: Plan,
    /// What the SpikingJelly-compatible pipeline did, step by step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<PipelineSummary>,
}

/// A budget in bytes and the peak it bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetFit {
    /// The budget, in bytes.
    pub bytes: u64,
    /// Which peak it bounds (reserved unless asked otherwise).
    pub kind: BudgetKind,
    /// Candidate plans whose exact peak was checked with a Meta step before one fitted.
    pub candidates_checked: usize,
    /// When the plan fits a reserved budget only because the caching allocator releases its
    /// cached segments at the budget (as PyTorch's does on a full device): the reserved peak
    /// the plan would reach with no limit, in bytes. The planned peaks are those under the limit.
    #[serde(default)]
    pub unbounded_reserved_bytes: Option<u64>,
}

impl PlanReport {
    /// Baseline peak over planned peak (2.0 = half the memory).
    pub fn reduction(&self) -> f64 {
        self.baseline_peak_bytes as f64 / self.planned_peak_bytes.max(1) as f64
    }
}

/// One step of the pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineStep {
    /// Level (1 wrap, 2 spatial split, 3 temporal split, 4 unwrap).
    pub level: u8,
    /// What was tried, e.g. `split features.3`.
    pub action: String,
    /// Whether it was kept.
    pub applied: bool,
    /// Why (e.g. "peak 172.8 MiB -> 170.1 MiB").
    pub reason: String,
    /// Peak after the step (kept or not), in bytes.
    pub peak_bytes: u64,
}

/// What the pipeline did, as SpikingJelly's `MemOptSummary` reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineSummary {
    /// Every step tried, in order.
    pub steps: Vec<PipelineStep>,
    /// Segments wrapped (checkpointed) at level 1.
    pub wrapped: usize,
    /// Segments split spatially at level 2.
    pub split: usize,
    /// Segments given time chunks at level 3.
    pub chunked: usize,
    /// Segments unwrapped at level 4.
    pub unwrapped: usize,
    /// Advice for the next run.
    pub recommendation: String,
}

impl PipelineSummary {
    /// Steps that were applied.
    pub fn applied(&self) -> impl Iterator<Item = &PipelineStep> {
        self.steps.iter().filter(|s| s.applied)
    }

    /// Steps that were tried and skipped.
    pub fn skipped(&self) -> impl Iterator<Item = &PipelineStep> {
        self.steps.iter().filter(|s| !s.applied)
    }
}

/// `bytes` in MiB with one decimal, for messages.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The peak a budget bounds: one of the caching allocator's levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Bytes of the segments the allocator holds from the device (allocated blocks, cached
    /// free blocks and split remainders): what runs out on a device. The default.
    #[default]
    Reserved,
    /// Bytes of the blocks handed to tensors: each request rounded up to 512 B, and a cached
    /// block reused whole when less than 1 MiB (large pool) or 512 B (small pool) would remain.
    Allocated,
    /// Bytes the tensors ask for, unrounded: the peak memopt reports first (`planned peak`),
    /// which the chain model composes exactly (what tools counting tensor bytes count).
    Requested,
}

impl BudgetKind {
    /// The peak of this kind among `levels`, in bytes.
    pub fn of(self, levels: &AllocatorLevels) -> u64 {
        match self {
            BudgetKind::Reserved => levels.reserved_bytes,
            BudgetKind::Allocated => levels.allocated_bytes,
            BudgetKind::Requested => levels.requested_bytes,
        }
    }

    /// The CLI spelling: `reserved`, `allocated` or `requested`.
    pub fn label(self) -> &'static str {
        match self {
            BudgetKind::Reserved => "reserved",
            BudgetKind::Allocated => "allocated",
            BudgetKind::Requested => "requested",
        }
    }
}

impl std::fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}
