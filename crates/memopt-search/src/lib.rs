//! memopt-search: memory plans and the strategies that find them, verified exactly.
//!
//! A [`PlanningSession`] measures every segment of a model under every option on the Meta
//! device and composes the figures into a [`chain::ChainModel`] whose predicted peak equals the
//! exact peak of a training step; strategies ([`strategy`]) search it (a dynamic program, the
//! SpikingJelly pipeline, memonger) and every returned plan is verified by a Meta step.
//!
//! ```
//! use memopt_search::{MinMemory, PlanningSession, Workload};
//! let workload = Workload::zoo_small("toy-if", 8).unwrap();
//! let mut session = PlanningSession::new(&workload).unwrap();
//! let report = session.plan(&MinMemory::default()).unwrap();
//! assert!(report.planned_peak_bytes <= report.baseline_peak_bytes);
//! ```
//!
//! # Composing your own optimizer
//!
//! This crate re-exports every type its public API takes or returns ([`Workload`], [`Plan`],
//! [`Policy`], [`Device`], [`InputSpec`], ...), so a crate that depends on `memopt-search`
//! alone can write a strategy, and `memopt-profiler` adds the measurements.
//!
//! 1. **The workload.** [`Workload::zoo_small`] (the size the CLI uses by default) or
//!    [`Workload::zoo_published`] (the published size, the CLI's `--published`), or
//!    [`Workload::custom`] for a model you build.
//! 2. **The session.** [`PlanningSession::new`] measures every segment on Meta (milliseconds).
//!    [`PlanningSession::sites`] gives the segments, [`Blocks::of`] groups them into blocks
//!    (runs of layers ending with a neuron), [`PlanningSession::peak`] gives any plan's exact
//!    peak in bytes and [`PlanningSession::overhead`] its predicted slowdown.
//! 3. **The strategy.** Implement [`Strategy`]: build a [`Plan`] (from [`Blocks::plan`], or
//!    entries you write) and return [`PlanningSession::report`], which checks it with a Meta
//!    step. Run it with [`PlanningSession::plan`]; the example on [`Strategy`] is a complete
//!    "checkpoint every other block" strategy.
//! 4. **The proof.** [`verify_plan`] runs a real step with and without the plan on the CPU and
//!    checks that the measured peak is the planned one and that the loss, gradients, BatchNorm
//!    running statistics, neuron states and updated parameters are bit-identical.
//!
//! `cargo run --release -p memopt-search --example every_other_block` does all four and compares
//! the result with the built-in strategies.
//!
//! **Per-module memory.** What a module saves for backward, allocates or holds is in the
//! [`MemoryReport`] of one step ([`profile_memory`], on Meta in milliseconds), per module and
//! [`Phase`] ([`ModuleMemory`]); this crate re-exports all of it:
//!
//! ```
//! use memopt_search::{Device, Phase, Plan, Workload, profile_memory};
//! let workload = Workload::zoo_small("cifar10dvs-vgg", 2).unwrap();
//! let report = profile_memory(&workload, &Plan::default(), Device::META).unwrap();
//! let conv = report.module("features.1.proj_bn.0", Phase::Forward).unwrap();
//! assert!(conv.saved_bytes > 0, "a convolution keeps its input for backward");
//! ```
//!
//! **Build settings.** memopt's kernels and its dependencies (`gemm`, `rayon`) are slow
//! without optimisation: a debug build of a crate that depends on memopt runs real training
//! steps about 75 times slower than a release build, because a workspace's
//! `[profile.dev.package."*"]` settings apply only to that workspace. Planning on Meta is fast
//! either way; for real steps (verification, training) build with `--release`, or add to your
//! own `Cargo.toml`:
//!
//! ```toml
//! [profile.dev.package."*"]
//! opt-level = 3
//! ```
#![warn(missing_docs)]

pub mod builder;
pub mod chain;
pub mod dp;
mod error;
pub mod measure;
mod parallel;
mod pricing;
pub mod report;
mod segment_key;
pub mod session;
pub mod sites;
pub mod strategy;

pub use error::{Result, SearchError};
pub use report::{BudgetFit, PipelineStep, PipelineSummary, PlanReport};
pub use session::{ExactCandidate, PlanningSession};
pub use strategy::{
    Block, Blocks, Budget, BudgetKind, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, Prefer,
    Profile, Strategy, block_plan, parse_size,
};

// The types this crate's public signatures use, so that depending on memopt-search suffices.
pub use memopt_checkpoint::{InputSpec, Model, PLAN_VERSION, Plan, PlanEntry, Policy};
pub use memopt_compress::CompressorKind;
pub use memopt_core::{Device, MemoryKind, Phase};
pub use memopt_profiler::{
    AllocatorLevels, CostModel, MemoryReport, Mismatch, ModuleMemory, PlanCheck, Quantity, StepRecord,
    Workload, profile_memory, verify_plan,
};
