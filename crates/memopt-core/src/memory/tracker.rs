//! The per-device memory tracker.

use super::{Allocation, AllocationId, MemoryAction, MemoryEvent, MemoryKind, current_scope};
use crate::Device;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// Receives every event of the trackers it is subscribed to. Called on the thread that caused
/// the event, after the tracker's own figures are updated.
pub trait MemorySubscriber: Send + Sync {
    /// Called once per allocation, free and re-tag.
    fn on_event(&self, event: &MemoryEvent);
}

/// Current and peak bytes of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Bytes of this kind held now.
    pub current: u64,
    /// Most bytes of this kind held at once since creation or the last [`MemoryTracker::reset_peak`].
    pub peak: u64,
}

/// A snapshot of a tracker's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStats {
    /// Device tracked.
    pub device: Device,
    /// Bytes held now.
    pub current: u64,
    /// Most bytes held at once since creation or the last reset, in bytes.
    pub peak: u64,
    /// Figures per kind, indexed by [`MemoryKind::index`].
    pub by_kind: [KindStats; MemoryKind::COUNT],
    /// Buffers alive now.
    pub live_allocations: u64,
    /// Events recorded since creation.
    pub events: u64,
}

impl MemoryStats {
    /// Figures of one kind.
    pub fn kind(&self, kind: MemoryKind) -> KindStats {
        self.by_kind[kind.index()]
    }
}

#[derive(Debug)]
struct TrackerState {
    next_id: u64,
    seq: u64,
    current: u64,
    peak: u64,
    by_kind: [KindStats; MemoryKind::COUNT],
    live: u64,
}

type SubscriberList = Arc<[(u64, Arc<dyn MemorySubscriber>)]>;

/// Records every allocation and free on one device, with exact current and peak bytes, overall
/// and per [`MemoryKind`], and forwards each event to its subscribers.
///
/// Trackers are per thread: [`MemoryTracker::current`] returns this thread's tracker for a device,
/// so concurrent tests or planners never see each other's bytes. A buffer remembers the tracker
/// that allocated it, so its free is recorded there whichever thread drops it.
pub struct MemoryTracker {
    device: Device,
    created: Instant,
    state: Mutex<TrackerState>,
    subscribers: RwLock<SubscriberList>,
    next_subscription: Mutex<u64>,
}

impl std::fmt::Debug for MemoryTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTracker")
            .field("device", &self.device)
            .field("stats", &self.stats())
            .finish()
    }
}

/// This thread's trackers: one default per device, created on first use, and a stack of
/// trackers installed on top of them.
#[derive(Default)]
struct Registry {
    defaults: Vec<Arc<MemoryTracker>>,
    installed: Vec<Arc<MemoryTracker>>,
}

thread_local! {
    static TRACKERS: RefCell<Registry> = RefCell::new(Registry::default());
}

impl MemoryTracker {
    /// A fresh tracker with no history. Install it with [`MemoryTracker::install`] to make
    /// allocations on this thread go through it.
    pub fn new(device: Device) -> Arc<Self> {
        Arc::new(MemoryTracker {
            device,
            created: Instant::now(),
            state: Mutex::new(TrackerState {
                next_id: 0,
                seq: 0,
                current: 0,
                peak: 0,
                by_kind: [KindStats::default(); MemoryKind::COUNT],
                live: 0,
            }),
            subscribers: RwLock::new(Arc::from(Vec::new())),
            next_subscription: Mutex::new(0),
        })
    }

    /// This thread's tracker for `device`, created on first use.
    pub fn current(device: Device) -> Arc<Self> {
        TRACKERS.with(|t| {
            let mut t = t.borrow_mut();
            let found = t
                .installed
                .iter()
                .rev()
                .chain(t.defaults.iter())
                .find(|tr| tr.device == device);
            if let Some(found) = found {
                return found.clone();
            }
            let tracker = MemoryTracker::new(device);
            t.defaults.push(tracker.clone());
            tracker
        })
    }

    /// Makes `tracker` this thread's tracker for its device until the guard drops; the previous
    /// one comes back afterwards. The estimator uses this to measure a step in isolation.
    pub fn install(tracker: Arc<MemoryTracker>) -> TrackerGuard {
        TRACKERS.with(|t| {
            let mut t = t.borrow_mut();
            let depth = t.installed.len();
            t.installed.push(tracker);
            TrackerGuard { depth }
        })
    }

    /// Device tracked.
    pub fn device(&self) -> Device {
        self.device
    }

    fn lock(&self) -> MutexGuard<'_, TrackerState> {
        // A poisoned lock only means a subscriber panicked; the figures are still consistent
        // because they are updated before subscribers run.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new buffer of `bytes` bytes and returns the guard that records its free. An
    /// error, recording nothing, when the bytes held would exceed `u64::MAX` (possible on Meta,
    /// whose sizes no real memory bounds).
    pub fn allocate(self: &Arc<Self>, bytes: u64, kind: MemoryKind) -> crate::Result<Allocation> {
        let (id, event) = {
            let mut s = self.lock();
            let current = s.current.checked_add(bytes).ok_or_else(|| {
                let scope = current_scope();
                crate::CoreError::ByteCountOverflow {
                    at: match scope.path() {
                        "" => format!("the model ({})", scope.phase()),
                        p => format!("module {p} ({})", scope.phase()),
                    },
                    device: self.device,
                    held: s.current,
                    bytes,
                }
            })?;
            let id = AllocationId(s.next_id);
            s.next_id += 1;
            s.current = current;
            s.peak = s.peak.max(s.current);
            let k = &mut s.by_kind[kind.index()];
            // A kind's bytes are part of the total, which did not overflow.
            k.current += bytes;
            k.peak = k.peak.max(k.current);
            s.live += 1;
            (id, self.event(&mut s, MemoryAction::Alloc, id, bytes, kind))
        };
        self.publish(event);
        Ok(Allocation::new(id, bytes, kind, self.clone()))
    }

    pub(super) fn record_free(&self, id: AllocationId, bytes: u64, kind: MemoryKind) {
        let event = {
            let mut s = self.lock();
            s.current -= bytes;
            s.by_kind[kind.index()].current -= bytes;
            s.live -= 1;
            self.event(&mut s, MemoryAction::Free, id, bytes, kind)
        };
        self.publish(event);
    }

    pub(super) fn record_retag(&self, alloc: &Allocation, from: MemoryKind, to: MemoryKind) {
        let bytes = alloc.bytes();
        let event = {
            let mut s = self.lock();
            s.by_kind[from.index()].current -= bytes;
            let k = &mut s.by_kind[to.index()];
            k.current += bytes;
            k.peak = k.peak.max(k.current);
            self.event(&mut s, MemoryAction::Retag { from }, alloc.id(), bytes, to)
        };
        self.publish(event);
    }

    fn event(
        &self,
        s: &mut TrackerState,
        action: MemoryAction,
        allocation: AllocationId,
        bytes: u64,
        kind: MemoryKind,
    ) -> MemoryEvent {
        let seq = s.seq;
        s.seq += 1;
        MemoryEvent {
            seq,
            action,
            allocation,
            bytes,
            kind,
            device: self.device,
            scope: current_scope(),
            current_bytes: s.current,
            time_ns: self.created.elapsed().as_nanos() as u64,
        }
    }

    fn publish(&self, event: MemoryEvent) {
        let subs = self.subscribers.read().unwrap_or_else(|e| e.into_inner()).clone();
        for (_, sub) in subs.iter() {
            sub.on_event(&event);
        }
    }

    /// Bytes held now.
    pub fn current_bytes(&self) -> u64 {
        self.lock().current
    }

    /// Most bytes held at once since creation or the last [`MemoryTracker::reset_peak`].
    pub fn peak_bytes(&self) -> u64 {
        self.lock().peak
    }

    /// A snapshot of all figures.
    pub fn stats(&self) -> MemoryStats {
        let s = self.lock();
        MemoryStats {
            device: self.device,
            current: s.current,
            peak: s.peak,
            by_kind: s.by_kind,
            live_allocations: s.live,
            events: s.seq,
        }
    }

    /// Sets every peak (overall and per kind) to the current value.
    pub fn reset_peak(&self) {
        let mut s = self.lock();
        s.peak = s.current;
        for k in s.by_kind.iter_mut() {
            k.peak = k.current;
        }
    }

    /// Adds a subscriber; it receives every event until the returned [`Subscription`] drops.
    pub fn subscribe(self: &Arc<Self>, subscriber: Arc<dyn MemorySubscriber>) -> Subscription {
        let id = {
            let mut n = self.next_subscription.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            *n
        };
        let mut subs = self.subscribers.write().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<_> = subs.iter().cloned().collect();
        list.push((id, subscriber));
        *subs = Arc::from(list);
        Subscription {
            tracker: self.clone(),
            id,
        }
    }

    fn unsubscribe(&self, id: u64) {
        let mut subs = self.subscribers.write().unwrap_or_else(|e| e.into_inner());
        let list: Vec<_> = subs.iter().filter(|(i, _)| *i != id).cloned().collect();
        *subs = Arc::from(list);
    }
}

/// Keeps a subscriber attached; detaches it when dropped.
#[must_use = "the subscriber is detached when the subscription is dropped"]
pub struct Subscription {
    tracker: Arc<MemoryTracker>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.tracker.unsubscribe(self.id);
    }
}

/// Restores the previously installed tracker when dropped.
#[must_use = "the tracker is uninstalled when the guard is dropped"]
pub struct TrackerGuard {
    depth: usize,
}

impl Drop for TrackerGuard {
    fn drop(&mut self) {
        TRACKERS.with(|t| t.borrow_mut().installed.truncate(self.depth));
    }
}
