//! Exact memory accounting: every buffer is allocated through its device's [`MemoryTracker`],
//! which records each allocation, free and re-tag as a [`MemoryEvent`] with its bytes, its
//! [`MemoryKind`] and the [`Scope`] (module path and [`Phase`]) it happened in.

mod allocation;
mod block;
pub mod caching;
mod event;
mod kind;
mod module_path;
mod registry;
mod scope;
mod tracker;
mod tracker_stats;

pub use allocation::{Allocation, AllocationId};
pub use block::{DeviceBlock, HostBlock};
pub use event::{MemoryAction, MemoryEvent};
pub use kind::MemoryKind;
pub use module_path::ModulePath;
pub use registry::TrackerGuard;
pub use scope::{
    Phase, PhaseGuard, Scope, ScopeEvent, ScopeGuard, ScopeListener, ScopeListenerGuard, ScopeTransition,
    add_scope_listener, current_scope, enter_module, enter_phase, enter_scope,
};
pub use tracker::{MemorySubscriber, MemoryTracker, Subscription};
pub use tracker_stats::{KindStats, MemoryStats};
