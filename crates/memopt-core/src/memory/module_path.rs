//! Module identity: the dotted path of a module in the model tree.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The path of a module in the model tree, its children's names joined by dots as PyTorch's
/// `named_modules` spells them (`"features.3.neuron"`); the root is `""`. Cheap to clone
/// (shared string). Joining ([`ModulePath::child`]) and ancestry ([`ModulePath::is_under`])
/// live here and nowhere else, so `"features.30"` is never taken for a descendant of
/// `"features.3"`. Dereferences to `&str` and serialises as the plain string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ModulePath(Arc<str>);

impl Serialize for ModulePath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ModulePath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ModulePath::from)
    }
}

impl ModulePath {
    /// The root module's path, `""`.
    pub fn root() -> ModulePath {
        ModulePath(Arc::from(""))
    }

    /// Whether this is the root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of child `name` of this module.
    pub fn child(&self, name: &str) -> ModulePath {
        if self.is_root() {
            ModulePath(Arc::from(name))
        } else {
            // Joined by hand: `format!` costs more than the copy, and every module call joins
            // one path (the planner's Meta measurements make millions of calls).
            let mut joined = String::with_capacity(self.0.len() + 1 + name.len());
            joined.push_str(&self.0);
            joined.push('.');
            joined.push_str(name);
            ModulePath(Arc::from(joined))
        }
    }

    /// The parent's path; `None` for the root.
    pub fn parent(&self) -> Option<ModulePath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rsplit_once('.') {
            Some((parent, _)) => ModulePath::from(parent),
            None => ModulePath::root(),
        })
    }

    /// Whether this module is `ancestor` or below it (everything is under the root `""`).
    pub fn is_under(&self, ancestor: &str) -> bool {
        Self::str_is_under(&self.0, ancestor)
    }

    /// Whether this module is strictly below `ancestor`.
    pub fn is_below(&self, ancestor: &str) -> bool {
        Self::str_is_below(&self.0, ancestor)
    }

    /// [`ModulePath::is_under`] of a path held as a string, without making a `ModulePath` of
    /// it (for callers that compare many paths).
    pub fn str_is_under(path: &str, ancestor: &str) -> bool {
        ancestor.is_empty() || path == ancestor || Self::str_is_below(path, ancestor)
    }

    /// [`ModulePath::is_below`] of a path held as a string.
    pub fn str_is_below(path: &str, ancestor: &str) -> bool {
        if ancestor.is_empty() {
            return !path.is_empty();
        }
        path.len() > ancestor.len() && path.starts_with(ancestor) && path.as_bytes()[ancestor.len()] == b'.'
    }

    /// Whether both share one string (a cheap "same scope" test).
    pub fn ptr_eq(&self, other: &ModulePath) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for ModulePath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ModulePath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ModulePath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ModulePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ModulePath {
    fn from(s: &str) -> Self {
        ModulePath(Arc::from(s))
    }
}

impl From<String> for ModulePath {
    fn from(s: String) -> Self {
        ModulePath(Arc::from(s))
    }
}

impl From<Arc<str>> for ModulePath {
    fn from(s: Arc<str>) -> Self {
        ModulePath(s)
    }
}

impl From<&ModulePath> for String {
    fn from(p: &ModulePath) -> String {
        p.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::ModulePath;

    #[test]
    fn joining_and_ancestry_respect_segments() {
        let root = ModulePath::root();
        let f3 = root.child("features").child("3");
        assert_eq!(f3.as_str(), "features.3");
        assert_eq!(f3.child("neuron").to_string(), "features.3.neuron");
        assert!(f3.child("neuron").is_under(&f3));
        assert!(f3.is_under(&f3) && !f3.is_below(&f3));
        assert!(f3.is_under("") && f3.is_below(""));
        assert!(!root.is_below("") && root.is_under(""));
        assert!(!ModulePath::from("features.30").is_under("features.3"));
        assert!(!ModulePath::from("features").is_under("features.3"));
        assert_eq!(f3.parent(), Some(ModulePath::from("features")));
        assert_eq!(ModulePath::from("features").parent(), Some(root.clone()));
        assert_eq!(root.parent(), None);
    }
}
