//! The scope an allocation happens in: a module path and a phase, kept per thread.
//!
//! Listeners attached with [`add_scope_listener`] are told, on their thread, each time a scope
//! is entered or left (profilers use this for module boundaries and wall time). With no listener
//! attached, entering and leaving a scope costs one thread-local flag check more than before.

use super::ModulePath;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

/// The phase of a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Outside a step: model construction, data loading.
    Setup,
    /// Forward pass.
    Forward,
    /// Backward pass.
    Backward,
    /// Forward pass re-run inside backward for a checkpointed segment.
    Recompute,
    /// Optimizer update.
    Optimizer,
}

impl Phase {
    /// snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Recompute => "recompute",
            Phase::Optimizer => "optimizer",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A module path and a phase. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    path: ModulePath,
    phase: Phase,
}

impl Scope {
    /// A scope from its parts.
    pub fn new(path: impl Into<ModulePath>, phase: Phase) -> Self {
        Scope {
            path: path.into(),
            phase,
        }
    }

    /// The root scope in the setup phase.
    pub fn root() -> Self {
        Scope::new("", Phase::Setup)
    }

    /// Module path, e.g. `features.3.neuron` (`""` at the root).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The module path as a value.
    pub fn module_path(&self) -> &ModulePath {
        &self.path
    }

    /// Phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The scope of child module `name` in the same phase.
    pub fn child(&self, name: &str) -> Scope {
        Scope::new(self.path.child(name), self.phase)
    }

    /// The same path in another phase.
    pub fn with_phase(&self, phase: Phase) -> Scope {
        Scope::new(self.path.clone(), phase)
    }
}

thread_local! {
    static STACK: RefCell<Vec<Scope>> = RefCell::new(vec![Scope::root()]);
    static LISTENERS: RefCell<ListenerList> = RefCell::new(Rc::from(Vec::new()));
    static LISTENING: Cell<bool> = const { Cell::new(false) };
    static NEXT_LISTENER: Cell<u64> = const { Cell::new(0) };
}

type ListenerList = Rc<[(u64, Rc<dyn ScopeListener>)]>;

/// Whether a scope was entered or left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeTransition {
    /// The scope was pushed and is now current.
    Enter,
    /// The scope was popped; [`ScopeEvent::current`] is the one current again.
    Exit,
}

/// One scope transition, as delivered to [`ScopeListener`]s.
#[derive(Debug, Clone, Copy)]
pub struct ScopeEvent<'a> {
    /// Entered or left.
    pub transition: ScopeTransition,
    /// The scope entered or left.
    pub scope: &'a Scope,
    /// Position of `scope` on the thread's scope stack (the root scope is at 0).
    pub depth: usize,
    /// The current scope after the transition (`scope` itself on enter).
    pub current: &'a Scope,
    /// When the transition happened.
    pub time: Instant,
}

/// Told about every scope entered or left on the thread it was attached on, in order. Nested
/// scopes are left innermost first.
pub trait ScopeListener {
    /// Called after the scope stack changed.
    fn on_scope(&self, event: &ScopeEvent<'_>);
}

/// Keeps a scope listener attached to this thread; detaches it when dropped.
#[must_use = "the listener is detached when the guard is dropped"]
pub struct ScopeListenerGuard {
    id: u64,
    // Listeners are per thread: the guard must be dropped on the thread that attached it.
    _not_send: std::marker::PhantomData<Rc<()>>,
}

impl Drop for ScopeListenerGuard {
    fn drop(&mut self) {
        LISTENERS.with(|l| {
            let mut l = l.borrow_mut();
            let kept: Vec<_> = l.iter().filter(|(i, _)| *i != self.id).cloned().collect();
            LISTENING.with(|f| f.set(!kept.is_empty()));
            *l = Rc::from(kept);
        });
    }
}

/// Attaches `listener` to this thread's scope transitions until the guard drops.
pub fn add_scope_listener(listener: Rc<dyn ScopeListener>) -> ScopeListenerGuard {
    let id = NEXT_LISTENER.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    });
    LISTENERS.with(|l| {
        let mut l = l.borrow_mut();
        let mut list: Vec<_> = l.iter().cloned().collect();
        list.push((id, listener));
        *l = Rc::from(list);
    });
    LISTENING.with(|f| f.set(true));
    ScopeListenerGuard {
        id,
        _not_send: std::marker::PhantomData,
    }
}

/// Tells every listener about one transition. Called with the scope stack released, so a
/// listener may read [`current_scope`] or even enter scopes of its own.
fn notify(transition: ScopeTransition, scope: &Scope, depth: usize, current: &Scope) {
    let listeners = LISTENERS.with(|l| l.borrow().clone());
    let event = ScopeEvent {
        transition,
        scope,
        depth,
        current,
        time: Instant::now(),
    };
    for (_, listener) in listeners.iter() {
        listener.on_scope(&event);
    }
}

fn listening() -> bool {
    LISTENING.with(Cell::get)
}

/// The current scope of this thread.
pub fn current_scope() -> Scope {
    STACK.with(|s| s.borrow().last().cloned().unwrap_or_else(Scope::root))
}

/// Restores the previous scope when dropped.
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard {
    depth: usize,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        if !listening() {
            STACK.with(|s| s.borrow_mut().truncate(self.depth));
            return;
        }
        let (popped, current) = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let from = self.depth.min(s.len());
            let popped: Vec<Scope> = s.drain(from..).collect();
            (popped, s.last().cloned().unwrap_or_else(Scope::root))
        });
        for (i, scope) in popped.iter().enumerate().rev() {
            let after = popped[..i].last().unwrap_or(&current);
            notify(ScopeTransition::Exit, scope, self.depth + i, after);
        }
    }
}

/// Alias used by [`enter_phase`].
pub type PhaseGuard = ScopeGuard;

/// Makes `scope` current until the guard drops.
pub fn enter_scope(scope: Scope) -> ScopeGuard {
    let notified = listening().then(|| scope.clone());
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        let depth = s.len();
        s.push(scope);
        depth
    });
    if let Some(scope) = notified {
        notify(ScopeTransition::Enter, &scope, depth, &scope);
    }
    ScopeGuard { depth }
}

/// Enters child module `name` of the current scope.
pub fn enter_module(name: &str) -> ScopeGuard {
    enter_scope(current_scope().child(name))
}

/// Switches the current scope to `phase`, keeping the path.
pub fn enter_phase(phase: Phase) -> PhaseGuard {
    enter_scope(current_scope().with_phase(phase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(RefCell<Vec<String>>);

    impl ScopeListener for Log {
        fn on_scope(&self, e: &ScopeEvent<'_>) {
            let t = match e.transition {
                ScopeTransition::Enter => "enter",
                ScopeTransition::Exit => "exit",
            };
            self.0.borrow_mut().push(format!(
                "{t} {}/{} depth {} now {}/{}",
                e.scope.path(),
                e.scope.phase(),
                e.depth,
                e.current.path(),
                e.current.phase()
            ));
        }
    }

    #[test]
    fn listeners_see_every_transition_in_order() {
        let log = Rc::new(Log::default());
        let guard = add_scope_listener(log.clone());
        {
            let _f = enter_scope(Scope::new("", Phase::Forward));
            let _a = enter_module("a");
            let _b = enter_module("b");
        }
        drop(guard);
        let _after = enter_module("c");
        assert_eq!(
            *log.0.borrow(),
            vec![
                "enter /forward depth 1 now /forward",
                "enter a/forward depth 2 now a/forward",
                "enter a.b/forward depth 3 now a.b/forward",
                "exit a.b/forward depth 3 now a/forward",
                "exit a/forward depth 2 now /forward",
                "exit /forward depth 1 now /setup",
            ]
        );
    }

    #[test]
    fn a_guard_dropped_out_of_order_reports_every_popped_scope_innermost_first() {
        let log = Rc::new(Log::default());
        let _guard = add_scope_listener(log.clone());
        let outer = enter_module("x");
        let inner = enter_module("y");
        drop(outer);
        drop(inner);
        assert_eq!(
            log.0.borrow()[2..],
            [
                "exit x.y/setup depth 2 now x/setup".to_string(),
                "exit x/setup depth 1 now /setup".to_string(),
            ]
        );
        assert_eq!(current_scope(), Scope::root());
    }

    #[test]
    fn two_listeners_are_independent() {
        let a = Rc::new(Log::default());
        let b = Rc::new(Log::default());
        let ga = add_scope_listener(a.clone());
        {
            let gb = add_scope_listener(b.clone());
            let _s = enter_module("m");
            drop(gb);
        }
        drop(ga);
        assert_eq!(a.0.borrow().len(), 2);
        assert_eq!(b.0.borrow().len(), 1);
        assert!(!listening());
    }
}
