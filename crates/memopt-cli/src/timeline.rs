//! The memory timeline of one step by kind, for charts: replayed on the Meta device, where every
//! allocation happens exactly as on the CPU.

use crate::error::Result;
use memopt_checkpoint::Plan;
use memopt_core::memory::{MemoryAction, MemoryEvent, MemorySubscriber};
use memopt_core::{MemoryKind, MemoryTracker};
use memopt_profiler::Workload;
use std::sync::{Arc, Mutex};

/// Bytes held per kind (indexed by [`MemoryKind::index`]) after each event of one step, the
/// first point being the state before the step (parameters, buffers, optimizer state, batch).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KindTimeline {
    /// One point per event.
    pub points: Vec<[u64; MemoryKind::COUNT]>,
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
    }
}

/// Runs one step of `workload` under `plan` on Meta and records the bytes of each kind after
/// every event.
pub fn record(workload: &Workload, plan: &Plan) -> Result<KindTimeline> {
    let tracker = MemoryTracker::new(workload.meta_device());
    let _installed = MemoryTracker::install(tracker.clone());
    let mut session = workload.instantiate(workload.meta_device(), plan)?;
    let stats = tracker.stats();
    let mut start = [0u64; MemoryKind::COUNT];
    for k in MemoryKind::ALL {
        start[k.index()] = stats.kind(k).current;
    }
    let recorder = Arc::new(Recorder(Mutex::new(KindTimeline { points: vec![start] })));
    let subscription = tracker.subscribe(recorder.clone());
    session.step()?;
    drop(subscription);
    let timeline = recorder.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(timeline)
}
