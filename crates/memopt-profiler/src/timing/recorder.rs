//! Time per module and phase for one run, from this thread's scope transitions: host wall
//! time on the CPU, GPU time from CUDA events on a GPU.

use crate::scopes::{KeyId, KeyTable, ScopeId};
use memopt_core::cuda::EventClock;
use memopt_core::memory::{ScopeEvent, ScopeListener, ScopeListenerGuard, add_scope_listener, current_scope};
use memopt_core::{CoreError, Device, Phase};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Where the marks of a run come from.
pub(crate) enum Clock {
    /// Host instants (the CPU computes synchronously, so wall time is its time).
    Host(Vec<Instant>),
    /// CUDA events on the GPU's stream: kernels run asynchronously, so a scope's time is the
    /// GPU's time between the events recorded when the host entered and left it.
    Gpu(EventClock),
}

impl Clock {
    /// The clock of `device`: CUDA events on a GPU, host instants elsewhere.
    pub(crate) fn for_device(device: Device) -> Result<Clock, CoreError> {
        Ok(match device {
            Device::Cuda(ordinal) => Clock::Gpu(EventClock::new(ordinal)?),
            _ => Clock::Host(Vec::new()),
        })
    }

    /// A new mark now (`at` is the host instant of the transition).
    pub(crate) fn mark(&mut self, at: Instant) -> Result<usize, CoreError> {
        match self {
            Clock::Host(v) => {
                v.push(at);
                Ok(v.len() - 1)
            }
            Clock::Gpu(c) => c.mark(),
        }
    }

    /// Every mark's time after the first (on a GPU, waits for the marked work to finish).
    pub(crate) fn resolve(&self) -> Result<Vec<Duration>, CoreError> {
        match self {
            Clock::Host(v) => Ok(v.iter().map(|t| t.saturating_duration_since(v[0])).collect()),
            Clock::Gpu(c) => Ok(c
                .elapsed_ms()?
                .into_iter()
                .map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1e3))
                .collect()),
        }
    }
}

struct RunState {
    keys: KeyTable,
    clock: Clock,
    /// The mark at which each open key was entered.
    open: Vec<Option<usize>>,
    /// (key, entered, left) for every closed stay.
    stays: Vec<(KeyId, usize, usize)>,
    visits: Vec<u64>,
    top: ScopeId,
    /// The first clock error (a listener cannot return one); reported by `finish`.
    error: Option<CoreError>,
}

impl RunState {
    fn intern(&mut self, scope: &memopt_core::Scope) -> ScopeId {
        let id = self.keys.intern(scope);
        let n = self.keys.len();
        self.open.resize(n, None);
        self.visits.resize(n, 0);
        id
    }

    fn close(&mut self, k: KeyId, mark: usize) {
        if let Some(since) = self.open[k].take() {
            self.stays.push((k, since, mark));
            self.visits[k] += 1;
        }
    }

    fn mark(&mut self, at: Instant) -> Option<usize> {
        if self.error.is_some() {
            return None;
        }
        match self.clock.mark(at) {
            Ok(m) => Some(m),
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }

    fn move_to(&mut self, scope: &memopt_core::Scope, at: Instant) {
        let to = self.intern(scope);
        if to == self.top {
            return;
        }
        let Some(mark) = self.mark(at) else {
            return;
        };
        let (ended, started) = self.keys.transition(self.top, to);
        for k in ended {
            self.close(k, mark);
        }
        for k in started {
            self.open[k] = Some(mark);
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
/// backward node) counts for that phase only. On a GPU the times are the GPU's (CUDA events).
pub(crate) struct TimingRecorder {
    state: Rc<RefCell<RunState>>,
    _listener: ScopeListenerGuard,
}

/// What a run measured: every key's time, and the run's whole span (first mark to last).
pub(crate) struct RunTimes {
    pub keys: Vec<KeyTime>,
    pub span: Duration,
}

impl TimingRecorder {
    /// Starts recording with `device`'s clock (CUDA events on a GPU, host time elsewhere).
    pub(crate) fn start(device: Device) -> Result<TimingRecorder, CoreError> {
        let mut state = RunState {
            keys: KeyTable::default(),
            clock: Clock::for_device(device)?,
            open: Vec::new(),
            stays: Vec::new(),
            visits: Vec::new(),
            top: ScopeId::default(),
            error: None,
        };
        let top = state.intern(&current_scope());
        state.top = top;
        let first = state.clock.mark(Instant::now())?;
        for k in state.keys.chain(top).to_vec() {
            state.open[k] = Some(first);
        }
        let state = Rc::new(RefCell::new(state));
        Ok(TimingRecorder {
            _listener: add_scope_listener(Rc::new(Sink(state.clone()))),
            state,
        })
    }

    /// Stops and returns every key's time, in order of first appearance, and the run's span.
    /// On a GPU this waits for the GPU to finish the run's work.
    pub(crate) fn finish(self) -> Result<RunTimes, CoreError> {
        let TimingRecorder { state, _listener } = self;
        drop(_listener);
        let mut s = state.borrow_mut();
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        let last = s.clock.mark(Instant::now())?;
        for k in 0..s.keys.len() {
            s.close(k, last);
        }
        let at = s.clock.resolve()?;
        let mut total = vec![Duration::ZERO; s.keys.len()];
        for &(k, from, to) in &s.stays {
            total[k] += at[to].saturating_sub(at[from]);
        }
        let keys = (0..s.keys.len())
            .map(|k| {
                let (path, phase) = s.keys.key(k);
                KeyTime {
                    path: path.to_string(),
                    phase,
                    time: total[k],
                    visits: s.visits[k],
                }
            })
            .collect();
        Ok(RunTimes { keys, span: at[last] })
    }
}
