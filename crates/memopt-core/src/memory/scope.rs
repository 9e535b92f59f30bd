//! The scope an allocation happens in: a module path and a phase, kept per thread.

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::Arc;

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

/// A module path (dot-separated, `""` for the root) and a phase. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    path: Arc<str>,
    phase: Phase,
}

impl Scope {
    /// A scope from its parts.
    pub fn new(path: impl Into<Arc<str>>, phase: Phase) -> Self {
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

    /// The shared path string.
    pub fn path_arc(&self) -> &Arc<str> {
        &self.path
    }

    /// Phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The scope of child module `name` in the same phase.
    pub fn child(&self, name: &str) -> Scope {
        let path: Arc<str> = if self.path.is_empty() {
            Arc::from(name)
        } else {
            Arc::from(format!("{}.{}", self.path, name))
        };
        Scope::new(path, self.phase)
    }

    /// The same path in another phase.
    pub fn with_phase(&self, phase: Phase) -> Scope {
        Scope::new(self.path.clone(), phase)
    }
}

thread_local! {
    static STACK: RefCell<Vec<Scope>> = RefCell::new(vec![Scope::root()]);
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
        STACK.with(|s| s.borrow_mut().truncate(self.depth));
    }
}

/// Alias used by [`enter_phase`].
pub type PhaseGuard = ScopeGuard;

/// Makes `scope` current until the guard drops.
pub fn enter_scope(scope: Scope) -> ScopeGuard {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let depth = s.len();
        s.push(scope);
        ScopeGuard { depth }
    })
}

/// Enters child module `name` of the current scope.
pub fn enter_module(name: &str) -> ScopeGuard {
    enter_scope(current_scope().child(name))
}

/// Switches the current scope to `phase`, keeping the path.
pub fn enter_phase(phase: Phase) -> PhaseGuard {
    enter_scope(current_scope().with_phase(phase))
}
