//! A chain of modules.

use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;

/// Runs its children in order, each on the previous one's outputs. Children are named by
/// position (`"0"`, `"1"`, ...) unless given names.
#[derive(Default)]
pub struct Sequential {
    children: Vec<(String, Box<dyn Module>)>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.children.iter().map(|(n, m)| (n, m.type_name())))
            .finish()
    }
}

impl Sequential {
    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a child named by its position.
    pub fn push(mut self, m: impl Module + 'static) -> Self {
        let name = self.children.len().to_string();
        self.children.push((name, Box::new(m)));
        self
    }

    /// Appends a named child.
    pub fn push_named(mut self, name: impl Into<String>, m: impl Module + 'static) -> Self {
        self.children.push((name.into(), Box::new(m)));
        self
    }

    /// Appends a boxed child named by its position.
    pub fn push_boxed(mut self, m: Box<dyn Module>) -> Self {
        let name = self.children.len().to_string();
        self.children.push((name, m));
        self
    }

    /// Number of children.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether there are no children.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }
}

impl Module for Sequential {
    fn type_name(&self) -> &'static str {
        "Sequential"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        cx.call_children(self, inputs)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.children
            .iter()
            .map(|(n, m)| (n.clone(), m.as_ref() as &dyn Module))
            .collect()
    }

    fn child_count(&self) -> usize {
        self.children.len()
    }

    fn children_in(&self, start: usize, end: usize) -> Vec<(String, &dyn Module)> {
        let end = end.min(self.children.len());
        self.children
            .get(start.min(end)..end)
            .unwrap_or_default()
            .iter()
            .map(|(n, m)| (n.clone(), m.as_ref() as &dyn Module))
            .collect()
    }

    fn child(&self, name: &str) -> Option<&dyn Module> {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.as_ref() as &dyn Module)
    }
}

impl PlannerHints for Sequential {
    fn children_form_chain(&self) -> bool {
        true
    }

    fn supports_child_ranges(&self) -> bool {
        true
    }

    fn config_key(&self) -> Option<String> {
        Some(String::new())
    }
}
