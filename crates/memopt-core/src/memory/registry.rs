//! This thread's trackers: the one allocations on a device go through now
//! ([`MemoryTracker::current`]) and trackers installed over it for one measurement
//! ([`MemoryTracker::install`]).

use super::MemoryTracker;
use crate::Device;
use std::cell::RefCell;
use std::sync::Arc;

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
    /// This thread's tracker for `device`, created on first use.
    pub fn current(device: Device) -> Arc<Self> {
        TRACKERS.with(|t| {
            let mut t = t.borrow_mut();
            let found = t
                .installed
                .iter()
                .rev()
                .chain(t.defaults.iter())
                .find(|tr| tr.device() == device);
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
