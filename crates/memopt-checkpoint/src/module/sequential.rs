//! A chain of modules.

use super::fold::one_input;
use super::{Module, PlannerHints};
use crate::autograd::Var;
use crate::context::Cx;
use crate::{Forward, ops};

/// Runs its children in order, each on the previous one's outputs. Children are named by
/// position (`"0"`, `"1"`, ...) unless given names. A residual chain
/// ([`Sequential::residual`]) adds its input to the last child's output.
#[derive(Default)]
pub struct Sequential {
    children: Vec<(String, Box<dyn Module>)>,
    /// Whether the input is added to the output (a skip connection around the chain).
    residual: bool,
    /// The type name it reports (`"Sequential"` unless set).
    type_name: Option<&'static str>,
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

    /// The same chain with a skip connection: its output is `x + chain(x)` for its one input
    /// `x`. A residual block whose branch is a chain is one module this way, which planners
    /// treat as one site (its input lives until the add, so its children are no chain).
    pub fn residual(mut self) -> Self {
        self.residual = true;
        self
    }

    /// The same chain reporting `type_name` (SpikingJelly's class of the container it stands
    /// for, such as `SpikformerMLP`).
    pub fn typed(mut self, type_name: &'static str) -> Self {
        self.type_name = Some(type_name);
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
        self.type_name.unwrap_or("Sequential")
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        if !self.residual {
            return cx.call_children(self, inputs);
        }
        let x = one_input(inputs, self.type_name())?;
        let y = one_input(cx.call_children(self, vec![x.clone()])?, self.type_name())?;
        Ok(vec![cx.final_op(|cx| ops::add(cx, &x, y))?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        crate::context::named_children(&self.children)
    }

    fn child_count(&self) -> usize {
        self.children.len()
    }

    fn children_in(&self, start: usize, end: usize) -> Vec<(String, &dyn Module)> {
        let end = end.min(self.children.len());
        crate::context::named_children(self.children.get(start.min(end)..end).unwrap_or_default())
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
        !self.residual
    }

    fn supports_child_ranges(&self) -> bool {
        !self.residual
    }

    fn config_key(&self) -> Option<String> {
        Some(if self.residual {
            "residual".into()
        } else {
            String::new()
        })
    }
}
