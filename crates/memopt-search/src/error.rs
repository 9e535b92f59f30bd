//! The error type of memopt-search.

use memopt_checkpoint::CheckpointError;
use memopt_core::CoreError;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, SearchError>;

/// What can go wrong while planning.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SearchError {
    /// The model, a plan or a step was rejected.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A kernel rejected its input.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The profiler (estimator, cost model) failed.
    #[error(transparent)]
    Profiler(#[from] memopt_profiler::ProfilerError),
    /// No plan reaches the budget.
    #[error(
        "no plan fits a budget of {budget} bytes of {kind} peak: the smallest {kind} peak found is {best} bytes ({best_plan_entries} module(s) with a policy)"
    )]
    Infeasible {
        /// The budget asked for, in bytes.
        budget: u64,
        /// The peak the budget bounds.
        kind: crate::report::BudgetKind,
        /// The least peak (of `kind`) of the plans tried, the least-peak plan among them, in
        /// bytes; for a reserved budget, the least device (reserve limit, in 2 MiB steps) the
        /// least-peak plan fits, its caching allocator releasing its cache there.
        best: u64,
        /// How many entries that least-peak plan has.
        best_plan_entries: usize,
    },
    /// A byte sum of the chain model does not fit in 64 bits: the model or batch is too large
    /// for any plan to be represented.
    #[error(
        "the byte count of segment '{segment}' does not fit in 64 bits: {what} is {left} + {right} bytes; use a smaller batch or model"
    )]
    ByteOverflow {
        /// Path of the segment whose term overflowed (`(root)` for the whole model).
        segment: String,
        /// Which sum overflowed.
        what: &'static str,
        /// The running sum, in bytes.
        left: u64,
        /// What was being added, in bytes.
        right: u64,
    },
    /// A strategy's settings are invalid.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// A bug: an invariant of the search did not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

impl SearchError {
    /// Whether a device ran out of memory while a candidate was measured: the candidate is
    /// rejected (it does not fit this device), nothing else is wrong with it or the model.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            SearchError::Core(e) => e.is_out_of_memory(),
            SearchError::Checkpoint(e) => e.is_out_of_memory(),
            SearchError::Profiler(e) => e.is_out_of_memory(),
            _ => false,
        }
    }
}
