//! The explicit state of stateful modules (neuron membrane potentials), keyed by module path.

use super::Var;
use memopt_core::ModulePath;
use std::collections::BTreeMap;

/// Membrane states of the neurons that have run in this step. A neuron reads its state on entry
/// (absent = reset value) and writes its final state on exit; checkpointed segments read and
/// write the states under their path as explicit inputs and outputs, so BPTT crosses segment and
/// chunk boundaries exactly.
#[derive(Debug, Default, Clone)]
pub struct StateStore {
    map: BTreeMap<ModulePath, Var>,
}

impl StateStore {
    /// The state of the module at `path`.
    pub fn get(&self, path: &str) -> Option<&Var> {
        self.map.get(path)
    }

    /// Sets the state of the module at `path`.
    pub fn set(&mut self, path: ModulePath, state: Var) {
        self.map.insert(path, state);
    }

    /// States of the modules at `prefix` or below it (all states for the root prefix `""`), in
    /// path order.
    pub fn under(&self, prefix: &str) -> Vec<(ModulePath, Var)> {
        self.map
            .iter()
            .filter(|(p, _)| p.is_under(prefix))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect()
    }

    /// States at or below any of `prefixes`, in path order.
    pub fn under_any(&self, prefixes: &[ModulePath]) -> Vec<(ModulePath, Var)> {
        self.map
            .iter()
            .filter(|(p, _)| prefixes.iter().any(|prefix| p.is_under(prefix)))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect()
    }

    /// Replaces the states at or below any of `prefixes` with `states` (a chunked segment
    /// starting another pass over its chunks from its entry states).
    pub(crate) fn restore_under(&mut self, prefixes: &[ModulePath], states: &[(ModulePath, Var)]) {
        self.map
            .retain(|p, _| !prefixes.iter().any(|prefix| p.is_under(prefix)));
        for (p, v) in states {
            self.map.insert(p.clone(), v.clone());
        }
    }

    /// Removes every state (the reset at the start of a step).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Number of states held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no state is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
