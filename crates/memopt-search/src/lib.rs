//! memopt-search: memory plans and the strategies that find them, verified exactly.
//!
//! A [`PlanningSession`] measures every segment of a model under every option on the Meta
//! device and composes the figures into a [`chain::ChainModel`] whose predicted peak equals the
//! exact peak of a training step; strategies ([`strategy`]) search it (a dynamic program, the
//! SpikingJelly pipeline, memonger) and every returned plan is verified by a Meta step.
//!
//! ```
//! use memopt_profiler::Workload;
//! use memopt_search::{MinMemory, PlanningSession, Strategy};
//! let workload = Workload::zoo_small("toy-if", 8).unwrap();
//! let mut session = PlanningSession::new(&workload).unwrap();
//! let report = MinMemory.plan(&mut session).unwrap();
//! assert!(report.planned_peak_bytes <= report.baseline_peak_bytes);
//! ```
#![warn(missing_docs)]

pub mod builder;
pub mod chain;
pub mod dp;
mod error;
pub mod measure;
pub mod report;
pub mod session;
pub mod sites;
pub mod strategy;

pub use error::{Result, SearchError};
pub use report::{PipelineStep, PipelineSummary, PlanReport};
pub use session::{ExactCandidate, PlanningSession};
pub use strategy::block_plan;
pub use strategy::{
    Budget, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, Prefer, Profile, Strategy, parse_size,
};
