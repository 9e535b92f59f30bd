//! The memory recorder: a tracker subscriber plus a scope listener that turn the event stream
//! into a [`MemoryReport`].

use super::{
    AllocatorFigures, AllocatorLevels, Holder, KindBytes, MemoryReport, ModuleMemory, TimelinePoint,
};
use crate::scopes::{KeyId, KeyTable, ScopeId};
use memopt_checkpoint::{Model, Plan};
use memopt_core::memory::{
    AllocationId, MemoryAction, MemoryEvent, MemorySubscriber, ScopeEvent, ScopeListener, ScopeListenerGuard,
    Subscription, add_scope_listener, current_scope,
};
use memopt_core::{Device, MemoryKind, MemoryTracker};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

/// Holder name of memory held before the recorder started.
pub(crate) const BEFORE_RECORDING: &str = "(before recording)";

#[derive(Debug, Clone, Copy)]
struct OpenVisit {
    /// Index of the first event that can belong to the visit.
    start: u64,
    /// Bytes allocated during the visit and not yet freed.
    alive: u64,
    /// Most bytes held on the device during the visit.
    peak: u64,
}

#[derive(Debug, Clone, Default)]
struct KeyFigures {
    visits: u64,
    allocated: u64,
    self_allocated: u64,
    held_at_exit: u64,
    peak: u64,
    saved: u64,
    packed: u64,
    open: Option<OpenVisit>,
}

impl KeyFigures {
    fn close(&mut self) {
        if let Some(v) = self.open.take() {
            self.visits += 1;
            self.held_at_exit += v.alive;
            self.peak = self.peak.max(v.peak);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct LiveAlloc {
    bytes: u64,
    scope: ScopeId,
    index: u64,
}

#[derive(Debug, Clone, Copy)]
struct Logged {
    index: u64,
    time_ns: u64,
    current: u64,
    action: MemoryAction,
    id: AllocationId,
    bytes: u64,
    kind: MemoryKind,
    scope: ScopeId,
}

/// Everything the recorder knows; cloneable so that an estimator can resume from the state
/// after building its model.
#[derive(Debug, Clone)]
pub(crate) struct RecorderState {
    device: Device,
    keys: KeyTable,
    figures: Vec<KeyFigures>,
    top: ScopeId,
    live: HashMap<AllocationId, LiveAlloc>,
    next_index: u64,
    current: u64,
    by_kind: KindBytes,
    baseline: u64,
    baseline_by_kind: KindBytes,
    peak: u64,
    peak_index: Option<u64>,
    peak_by_kind: KindBytes,
    peak_scope: ScopeId,
    allocator: AllocatorFigures,
    total_allocated: u64,
    log: Vec<Logged>,
    owners: HashMap<AllocationId, String>,
    module_types: HashMap<String, &'static str>,
}

impl RecorderState {
    fn new(tracker: &MemoryTracker) -> RecorderState {
        let stats = tracker.stats();
        let by_kind = KindBytes::from(&stats);
        let mut keys = KeyTable::default();
        let top = keys.intern(&current_scope());
        let mut s = RecorderState {
            device: tracker.device(),
            keys,
            figures: Vec::new(),
            top,
            live: HashMap::new(),
            next_index: 0,
            current: stats.current,
            by_kind,
            baseline: stats.current,
            baseline_by_kind: by_kind,
            peak: stats.current,
            peak_index: None,
            peak_by_kind: by_kind,
            peak_scope: top,
            allocator: AllocatorFigures::starting_at(AllocatorLevels {
                requested_bytes: stats.current,
                allocated_bytes: stats.allocated,
                reserved_bytes: stats.reserved,
            }),
            total_allocated: 0,
            log: Vec::new(),
            owners: HashMap::new(),
            module_types: HashMap::new(),
        };
        s.grow();
        let chain = s.keys.chain(top).to_vec();
        s.open(&chain);
        s
    }

    fn grow(&mut self) {
        let n = self.keys.len();
        if self.figures.len() < n {
            self.figures.resize(n, KeyFigures::default());
        }
    }

    fn intern(&mut self, scope: &memopt_core::Scope) -> ScopeId {
        let id = self.keys.intern(scope);
        self.grow();
        id
    }

    fn open(&mut self, keys: &[KeyId]) {
        for &k in keys {
            self.figures[k].open = Some(OpenVisit {
                start: self.next_index,
                alive: 0,
                peak: self.current,
            });
        }
    }

    fn move_to(&mut self, scope: &memopt_core::Scope) {
        let to = self.intern(scope);
        if to == self.top {
            return;
        }
        let (ended, started) = self.keys.transition(self.top, to);
        for k in ended {
            self.figures[k].close();
        }
        self.top = to;
        self.open(&started);
    }

    fn on_event(&mut self, e: &MemoryEvent) {
        let scope = self.intern(&e.scope);
        let index = self.next_index;
        self.next_index += 1;
        self.current = e.current_bytes;
        match e.action {
            MemoryAction::Alloc => {
                self.total_allocated += e.bytes;
                self.by_kind.add(e.kind, e.bytes);
                self.live.insert(
                    e.allocation,
                    LiveAlloc {
                        bytes: e.bytes,
                        scope,
                        index,
                    },
                );
                let chain = self.keys.chain(scope);
                for &k in chain {
                    let f = &mut self.figures[k];
                    f.allocated += e.bytes;
                    match e.kind {
                        MemoryKind::SavedForBackward => f.saved += e.bytes,
                        MemoryKind::Packed => f.packed += e.bytes,
                        _ => {}
                    }
                    if let Some(v) = f.open.as_mut().filter(|v| v.start <= index) {
                        v.alive += e.bytes;
                    }
                }
                if let Some(&own) = chain.last() {
                    self.figures[own].self_allocated += e.bytes;
                }
            }
            MemoryAction::Free => {
                self.by_kind.sub(e.kind, e.bytes);
                // Memory held before the recording is not in `live`; the holders' replay
                // accounts for it.
                if let Some(a) = self.live.remove(&e.allocation) {
                    for &k in self.keys.chain(a.scope) {
                        if let Some(v) = self.figures[k].open.as_mut().filter(|v| v.start <= a.index) {
                            v.alive = v.alive.saturating_sub(a.bytes);
                        }
                    }
                }
            }
            MemoryAction::Retag { from } => {
                self.by_kind.sub(from, e.bytes);
                self.by_kind.add(e.kind, e.bytes);
                if e.kind == MemoryKind::SavedForBackward {
                    for &k in self.keys.chain(scope) {
                        self.figures[k].saved += e.bytes;
                    }
                }
            }
        }
        for &k in self.keys.chain(self.top) {
            if let Some(v) = self.figures[k].open.as_mut() {
                v.peak = v.peak.max(self.current);
            }
        }
        self.allocator.observe(AllocatorLevels {
            requested_bytes: e.current_bytes,
            allocated_bytes: e.current_allocated,
            reserved_bytes: e.current_reserved,
        });
        if self.current > self.peak {
            self.peak = self.current;
            self.peak_index = Some(index);
            self.peak_by_kind = self.by_kind;
            self.peak_scope = scope;
        }
        self.log.push(Logged {
            index,
            time_ns: e.time_ns,
            current: self.current,
            action: e.action,
            id: e.allocation,
            bytes: e.bytes,
            kind: e.kind,
            scope,
        });
    }

    /// Who holds memory at the peak: replays the log up to the peak event.
    fn holders(&self) -> Vec<Holder> {
        let mut before = self.baseline_by_kind;
        let mut live: HashMap<AllocationId, (u64, MemoryKind, ScopeId)> = HashMap::new();
        if let Some(peak) = self.peak_index {
            for e in self.log.iter().take_while(|e| e.index <= peak) {
                match e.action {
                    MemoryAction::Alloc => {
                        live.insert(e.id, (e.bytes, e.kind, e.scope));
                    }
                    MemoryAction::Free => {
                        if live.remove(&e.id).is_none() {
                            before.sub(e.kind, e.bytes);
                        }
                    }
                    MemoryAction::Retag { from } => match live.get_mut(&e.id) {
                        Some(a) => a.1 = e.kind,
                        None => {
                            before.sub(from, e.bytes);
                            before.add(e.kind, e.bytes);
                        }
                    },
                }
            }
        }
        let mut by_holder: HashMap<String, KindBytes> = HashMap::new();
        if before.total() > 0 {
            by_holder.insert(BEFORE_RECORDING.to_string(), before);
        }
        for (id, (bytes, kind, scope)) in live {
            let path = self
                .owners
                .get(&id)
                .cloned()
                .unwrap_or_else(|| self.keys.scope(scope).path().to_string());
            by_holder.entry(path).or_default().add(kind, bytes);
        }
        let mut holders: Vec<Holder> = by_holder
            .into_iter()
            .map(|(path, by_kind)| Holder {
                path,
                bytes: by_kind.total(),
                by_kind,
            })
            .collect();
        holders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path)));
        holders
    }

    fn report(mut self, workload: String, plan: Plan) -> MemoryReport {
        let chain = self.keys.chain(self.top).to_vec();
        for k in chain {
            self.figures[k].close();
        }
        let holders = self.holders();
        let modules = (0..self.keys.len())
            .map(|k| {
                let (path, phase) = self.keys.key(k);
                let f = &self.figures[k];
                ModuleMemory {
                    path: path.to_string(),
                    module_type: self.module_types.get(&**path).copied().unwrap_or("").to_string(),
                    phase,
                    visits: f.visits,
                    allocated_bytes: f.allocated,
                    self_allocated_bytes: f.self_allocated,
                    held_at_exit_bytes: f.held_at_exit,
                    peak_bytes: f.peak,
                    saved_bytes: f.saved,
                    packed_bytes: f.packed,
                }
            })
            .collect();
        let peak_scope = self.keys.scope(self.peak_scope);
        MemoryReport {
            workload,
            device: self.device,
            data_dependent_sizes: crate::workload::plan_is_data_dependent(&plan),
            plan,
            baseline_bytes: self.baseline,
            peak_bytes: self.peak,
            peak_event: self.peak_index,
            peak_path: peak_scope.path().to_string(),
            peak_phase: peak_scope.phase(),
            by_kind: self.peak_by_kind,
            allocator: self.allocator,
            holders,
            final_bytes: self.current,
            total_allocated_bytes: self.total_allocated,
            modules,
            timeline: self
                .log
                .iter()
                .map(|e| TimelinePoint {
                    event: e.index,
                    time_ns: e.time_ns,
                    current_bytes: e.current,
                })
                .collect(),
        }
    }
}

fn lock(state: &Mutex<RecorderState>) -> MutexGuard<'_, RecorderState> {
    // A poisoned lock means a panic on another thread mid-update; the figures are still the
    // best available.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

struct EventSink(Arc<Mutex<RecorderState>>);

impl MemorySubscriber for EventSink {
    fn on_event(&self, event: &MemoryEvent) {
        lock(&self.0).on_event(event);
    }
}

struct ScopeSink(Arc<Mutex<RecorderState>>);

impl ScopeListener for ScopeSink {
    fn on_scope(&self, event: &ScopeEvent<'_>) {
        lock(&self.0).move_to(event.current);
    }
}

/// Records one tracker's events and this thread's module boundaries until
/// [`MemoryRecorder::finish`] turns them into a [`MemoryReport`].
///
/// Start it on the thread that runs the step, with the tracker that step allocates on
/// (install a fresh one with [`MemoryTracker::install`] to include the model, optimizer and
/// batch: see [`crate::profile_memory`]). Memory held before the start is reported as the
/// baseline.
pub struct MemoryRecorder {
    state: Arc<Mutex<RecorderState>>,
    _subscription: Subscription,
    _listener: ScopeListenerGuard,
}

impl MemoryRecorder {
    /// Starts recording `tracker`'s events and this thread's scopes.
    pub fn start(tracker: &Arc<MemoryTracker>) -> MemoryRecorder {
        Self::resume(tracker, RecorderState::new(tracker))
    }

    /// Continues from a saved state (the estimator's state after building its session).
    pub(crate) fn resume(tracker: &Arc<MemoryTracker>, mut state: RecorderState) -> MemoryRecorder {
        state.move_to(&current_scope());
        let state = Arc::new(Mutex::new(state));
        MemoryRecorder {
            _subscription: tracker.subscribe(Arc::new(EventSink(state.clone()))),
            _listener: add_scope_listener(Rc::new(ScopeSink(state.clone()))),
            state,
        }
    }

    /// Attributes an allocation to module `path` in the holders at the peak (instead of the
    /// scope that allocated it).
    pub fn attribute(&self, allocation: AllocationId, path: &str) {
        lock(&self.state).owners.insert(allocation, path.to_string());
    }

    /// Attributes `model`'s parameters and buffers to the modules that own them and learns its
    /// module types for the report.
    pub fn attribute_model(&self, model: &Model) {
        let mut s = lock(&self.state);
        let owner = |full: &str| full.rsplit_once('.').map_or("", |(m, _)| m).to_string();
        for (path, p) in model.params() {
            s.owners
                .insert(p.tensor().storage().allocation().id(), owner(&path));
        }
        for (path, b) in model.buffers() {
            s.owners
                .insert(b.tensor().storage().allocation().id(), owner(&path));
        }
        for info in model.modules() {
            s.module_types.insert(info.path, info.type_name);
        }
    }

    /// Bytes held on the device now, as recorded.
    pub fn current_bytes(&self) -> u64 {
        lock(&self.state).current
    }

    /// The most bytes held so far, as recorded.
    pub fn peak_bytes(&self) -> u64 {
        lock(&self.state).peak
    }

    /// A copy of the state so far.
    pub(crate) fn snapshot(&self) -> RecorderState {
        lock(&self.state).clone()
    }

    /// Stops recording and builds the report; `workload` and `plan` describe what ran.
    pub fn finish(self, workload: impl Into<String>, plan: Plan) -> MemoryReport {
        let MemoryRecorder {
            state,
            _subscription,
            _listener,
        } = self;
        drop(_subscription);
        drop(_listener);
        let state = lock(&state).clone();
        state.report(workload.into(), plan)
    }
}
