//! Wall time per module and phase for one run, from this thread's scope transitions.

use crate::scopes::{KeyId, KeyTable, ScopeId};
use memopt_core::Phase;
use memopt_core::memory::{ScopeEvent, ScopeListener, ScopeListenerGuard, add_scope_listener, current_scope};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct RunState {
    keys: KeyTable,
    open: Vec<Option<Instant>>,
    total: Vec<Duration>,
    visits: Vec<u64>,
    top: ScopeId,
}

impl RunState {
    fn intern(&mut self, scope: &memopt_core::Scope) -> ScopeId {
        let id = self.keys.intern(scope);
        let n = self.keys.len();
        self.open.resize(n, None);
        self.total.resize(n, Duration::ZERO);
        self.visits.resize(n, 0);
        id
    }

    fn close(&mut self, k: KeyId, at: Instant) {
        if let Some(since) = self.open[k].take() {
            self.total[k] += at.saturating_duration_since(since);
            self.visits[k] += 1;
        }
    }

    fn move_to(&mut self, scope: &memopt_core::Scope, at: Instant) {
        let to = self.intern(scope);
        if to == self.top {
            return;
        }
        let (ended, started) = self.keys.transition(self.top, to);
        for k in ended {
            self.close(k, at);
        }
        for k in started {
            self.open[k] = Some(at);
        }
        self.top = to;
    }
}

struct Sink(Rc<RefCell<RunState>>);

impl ScopeListener for Sink {
    fn on_scope(&self, event: &ScopeEvent<'_>) {
        self.0.borrow_mut().move_to(event.current, event.time);
    }
}

/// Time spent in one (path, phase) during one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyTime {
    pub path: String,
    pub phase: Phase,
    pub time: Duration,
    pub visits: u64,
}

/// Measures, on this thread, how long the current scope stays inside each (path, phase): a
/// parent's time includes its children's; time in another phase (a recomputation inside a
/// backward node) counts for that phase only.
pub(crate) struct TimingRecorder {
    state: Rc<RefCell<RunState>>,
    _listener: ScopeListenerGuard,
}

impl TimingRecorder {
    pub(crate) fn start() -> TimingRecorder {
        let mut state = RunState::default();
        let now = Instant::now();
        let top = state.intern(&current_scope());
        state.top = top;
        for k in state.keys.chain(top).to_vec() {
            state.open[k] = Some(now);
        }
        let state = Rc::new(RefCell::new(state));
        TimingRecorder {
            _listener: add_scope_listener(Rc::new(Sink(state.clone()))),
            state,
        }
    }

    /// Stops and returns every key's time, in order of first appearance.
    pub(crate) fn finish(self) -> Vec<KeyTime> {
        let TimingRecorder { state, _listener } = self;
        drop(_listener);
        let now = Instant::now();
        let mut s = state.borrow_mut();
        for k in 0..s.keys.len() {
            s.close(k, now);
        }
        (0..s.keys.len())
            .map(|k| {
                let (path, phase) = s.keys.key(k);
                KeyTime {
                    path: path.to_string(),
                    phase,
                    time: s.total[k],
                    visits: s.visits[k],
                }
            })
            .collect()
    }
}
