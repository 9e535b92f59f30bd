//! How module calls run: the seam between the context and the memory policies. [`Cx::call`]
//! and [`Cx::call_children`] call through a [`Dispatch`], which the policy layer implements
//! ([`crate::PolicyTable`]), so the context never names a policy and the
//! recursion context -> policy -> module -> context exists only at run time.

use super::{Cx, Module};
use crate::Forward;
use crate::autograd::Var;
use memopt_core::ModulePath;

/// What runs a module call under the memory policy of its path.
pub trait Dispatch<'m> {
    /// Runs `module`, whose path is `path` (the current scope), under the policy assigned to
    /// it.
    fn run(
        &self,
        cx: &mut Cx<'m>,
        path: ModulePath,
        module: &'m dyn Module,
        inputs: Vec<Var>,
    ) -> Forward<Vec<Var>>;

    /// Runs the children of `parent` (the module of the current scope, whose children form a
    /// chain) one after the other, applying the policies of runs of consecutive links (see
    /// [`Cx::call_children`]).
    fn run_children(&self, cx: &mut Cx<'m>, parent: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>>;

    /// Runs links `start..end` of `parent`'s chain and the first `into_next` links of the
    /// child after them as one segment under the policy of that run (see
    /// [`Cx::call_child_run`]).
    fn run_child_range(
        &self,
        cx: &mut Cx<'m>,
        parent: &'m dyn Module,
        links: (usize, usize, usize),
        inputs: Vec<Var>,
    ) -> Forward<Vec<Var>>;
}
