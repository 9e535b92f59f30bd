//! The memory timeline of one step by kind, for charts: replayed on the Meta device, where every
//! allocation happens exactly as on the CPU.

use crate::error::Result;
use memopt_checkpoint::Plan;
use memopt_core::memory::{MemoryAction, MemoryEvent, MemorySubscriber, Phase};
use memopt_core::{MemoryKind, MemoryTracker};
use memopt_profiler::Workload;
use std::sync::{Arc, Mutex};

/// Bytes held per kind (indexed by [`MemoryKind::index`]) after each event of one step, the
/// first point being the state before the step (parameters, buffers, optimizer state, batch).
/// The per-kind figures are requested bytes; `allocated` and `reserved` give the caching
/// allocator's other two levels at the same points.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KindTimeline {
    /// One point per event: requested bytes per kind.
    pub points: Vec<[u64; MemoryKind::COUNT]>,
    /// Allocated bytes (the allocator's blocks) at each point.
    pub allocated: Vec<u64>,
    /// Reserved bytes (the allocator's segments) at each point.
    pub reserved: Vec<u64>,
    /// Phase and module path of each point's event (the first point: setup, root).
    pub scopes: Vec<(Phase, String)>,
}

impl KindTimeline {
    /// Total bytes at point `i`.
    pub fn total(&self, i: usize) -> u64 {
        self.points.get(i).map_or(0, |p| p.iter().sum())
    }

    /// The highest total, in bytes.
    pub fn peak(&self) -> u64 {
        (0..self.points.len()).map(|i| self.total(i)).max().unwrap_or(0)
    }

    /// The highest reserved total, in bytes.
    pub fn reserved_peak(&self) -> u64 {
        self.reserved.iter().copied().max().unwrap_or(0)
    }

    /// The kinds that are ever non-zero, in [`MemoryKind::ALL`] order.
    pub fn kinds_used(&self) -> Vec<MemoryKind> {
        MemoryKind::ALL
            .into_iter()
            .filter(|k| self.points.iter().any(|p| p[k.index()] > 0))
            .collect()
    }
}

struct Recorder(Mutex<KindTimeline>);

impl MemorySubscriber for Recorder {
    fn on_event(&self, event: &MemoryEvent) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut p = t.points.last().copied().unwrap_or_default();
        match event.action {
            MemoryAction::Alloc => p[event.kind.index()] += event.bytes,
            MemoryAction::Free => {
                let v = &mut p[event.kind.index()];
                *v = v.saturating_sub(event.bytes);
            }
            MemoryAction::Retag { from } => {
                let v = &mut p[from.index()];
                *v = v.saturating_sub(event.bytes);
                p[event.kind.index()] += event.bytes;
            }
        }
        t.points.push(p);
        t.allocated.push(event.current_allocated);
        t.reserved.push(event.current_reserved);
        t.scopes
            .push((event.scope.phase(), event.scope.path().to_string()));
    }
}

/// Runs one step of `workload` under `plan` on Meta and records the bytes of each kind, and
/// the allocated and reserved totals, after every event. The step starts from an emptied
/// cache, as the profiler's and the estimator's do.
pub fn record(workload: &Workload, plan: &Plan) -> Result<KindTimeline> {
    let tracker = MemoryTracker::new(workload.meta_device());
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload.instantiate(workload.meta_device(), plan)?;
    tracker.empty_cache();
    let stats = tracker.stats();
    let mut start = [0u64; MemoryKind::COUNT];
    for k in MemoryKind::ALL {
        start[k.index()] = stats.kind(k).current;
    }
    let recorder = Arc::new(Recorder(Mutex::new(KindTimeline {
        points: vec![start],
        allocated: vec![stats.allocated],
        reserved: vec![stats.reserved],
        scopes: vec![(Phase::Setup, String::new())],
    })));
    let subscription = tracker.subscribe(recorder.clone());
    session.step()?;
    drop(subscription);
    let timeline = recorder.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(timeline)
}
