//! Module keys and visits, shared by the memory and timing profilers.
//!
//! A *key* is a module path and a phase. An event or an instant belongs to key `(M, P)` when the
//! current scope has phase `P` and a path equal to `M` or below it (`M` is a dot-separated prefix
//! of it): a parent's figures include its children's. A *visit* of a key is a maximal stretch of
//! time during which the current scope belongs to it. Every key keeps its own figures, so nested
//! modules never share (or reset) each other's counters.

use memopt_core::{Phase, Scope};
use std::collections::HashMap;
use std::sync::Arc;

/// Index of a key in a [`KeyTable`].
pub(crate) type KeyId = usize;
/// Index of an interned scope in a [`KeyTable`].
pub(crate) type ScopeId = usize;

/// Interned keys and scopes; each scope knows its chain of keys, root first.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyTable {
    keys: Vec<(Arc<str>, Phase)>,
    key_ids: HashMap<(Arc<str>, Phase), KeyId>,
    scopes: Vec<Scope>,
    scope_ids: HashMap<Scope, ScopeId>,
    chains: Vec<Vec<KeyId>>,
    last: Option<(Scope, ScopeId)>,
}

impl KeyTable {
    /// Path and phase of a key.
    pub(crate) fn key(&self, k: KeyId) -> (&Arc<str>, Phase) {
        let (p, ph) = &self.keys[k];
        (p, *ph)
    }

    /// Number of keys (ids are `0..len`, in order of first appearance).
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The interned scope.
    pub(crate) fn scope(&self, s: ScopeId) -> &Scope {
        &self.scopes[s]
    }

    /// The keys a scope belongs to, root first (innermost last).
    pub(crate) fn chain(&self, s: ScopeId) -> &[KeyId] {
        &self.chains[s]
    }

    fn key_id(&mut self, path: &str, phase: Phase) -> KeyId {
        if let Some(&k) = self.key_ids.get(&(Arc::from(path), phase)) {
            return k;
        }
        let id = self.keys.len();
        let path: Arc<str> = Arc::from(path);
        self.keys.push((path.clone(), phase));
        self.key_ids.insert((path, phase), id);
        id
    }

    /// Interns `scope` (and the keys of its chain).
    pub(crate) fn intern(&mut self, scope: &Scope) -> ScopeId {
        if let Some((last, id)) = &self.last
            && last.module_path().ptr_eq(scope.module_path())
            && last.phase() == scope.phase()
        {
            return *id;
        }
        let id = match self.scope_ids.get(scope) {
            Some(&id) => id,
            None => {
                let path = scope.path();
                let mut chain = vec![self.key_id("", scope.phase())];
                if !path.is_empty() {
                    for (i, c) in path.char_indices() {
                        if c == '.' {
                            chain.push(self.key_id(&path[..i], scope.phase()));
                        }
                    }
                    chain.push(self.key_id(path, scope.phase()));
                }
                let id = self.scopes.len();
                self.scopes.push(scope.clone());
                self.scope_ids.insert(scope.clone(), id);
                self.chains.push(chain);
                id
            }
        };
        self.last = Some((scope.clone(), id));
        id
    }

    /// The keys whose visit ends and the keys whose visit starts when the current scope moves
    /// from `from` to `to`: ended innermost first, started root first.
    pub(crate) fn transition(&self, from: ScopeId, to: ScopeId) -> (Vec<KeyId>, Vec<KeyId>) {
        let (a, b) = (self.chain(from), self.chain(to));
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        (a[common..].iter().rev().copied().collect(), b[common..].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_are_prefixes_with_the_scope_phase() {
        let mut t = KeyTable::default();
        let s = t.intern(&Scope::new("features.3.neuron", Phase::Backward));
        let names: Vec<String> = t
            .chain(s)
            .iter()
            .map(|&k| format!("{}/{}", t.key(k).0, t.key(k).1))
            .collect();
        assert_eq!(
            names,
            [
                "/backward",
                "features/backward",
                "features.3/backward",
                "features.3.neuron/backward"
            ]
        );
        let root = t.intern(&Scope::root());
        assert_eq!(t.chain(root).len(), 1);
    }

    #[test]
    fn transitions_end_and_start_only_what_changes() {
        let mut t = KeyTable::default();
        let a = t.intern(&Scope::new("a.b.c", Phase::Forward));
        let d = t.intern(&Scope::new("a.d", Phase::Forward));
        let r = t.intern(&Scope::new("a.b", Phase::Recompute));
        let (ended, started) = t.transition(a, d);
        let name = |k: KeyId| t.key(k).0.to_string();
        assert_eq!(
            ended.iter().map(|&k| name(k)).collect::<Vec<_>>(),
            ["a.b.c", "a.b"]
        );
        assert_eq!(started.iter().map(|&k| name(k)).collect::<Vec<_>>(), ["a.d"]);
        let (ended, started) = t.transition(d, r);
        assert_eq!(ended.len(), 3, "a phase change ends the whole chain");
        assert_eq!(started.len(), 3);
        assert_eq!(t.transition(a, a), (vec![], vec![]));
    }
}
