//! Running a chain container's children: one by one, runs of consecutive links as one
//! segment under their policy, and the part of a child's chain that a run before it did not
//! cover ([`crate::PlanEntry::into_next`]).

use super::Cx;
use crate::autograd::Var;
use crate::module::Module;
use crate::module::links::{chain_links, step_at};
use crate::policy::Segment;
use crate::{CheckpointError, Result};
use memopt_core::memory::{current_scope, enter_module};

impl<'m> Cx<'m> {
    /// Runs the children of `parent` (the module of the current scope, whose children form a
    /// chain) one after the other, each on the previous one's outputs (passed through
    /// [`Module::before_child`]), applying the policies assigned to runs of consecutive links
    /// of its chain (plan entries with `children`; see [`crate::module::chain_links`]). An
    /// inlined child that no run touches is called whole. A child that a run goes on into
    /// ([`crate::PlanEntry::into_next`]) runs its remaining links after the run.
    pub fn call_children(&mut self, parent: &'m dyn Module, inputs: Vec<Var>) -> Result<Vec<Var>> {
        let path = current_scope().module_path().clone();
        let window = self.chain_window.take();
        let policies = self.policies;
        let ranges = policies.child_ranges(&path);
        let links = chain_links(parent);
        let (mut i, n) = match window {
            Some((from, to)) => (from, to.min(links.len())),
            None => (0, links.len()),
        };
        let untouched = |a: usize, b: usize| !ranges.iter().any(|r| r.start < b && a < r.end);
        let mut xs = inputs;
        // Links of the child at `i` a run before it covered (its `into_next`).
        let mut covered = 0;
        while i < n {
            if covered > 0 {
                // The run applied `before_child` to this child's input already.
                let link = &links[i];
                self.unread_next = i + 1 >= n && self.unread_call;
                self.final_next = i + 1 >= n;
                xs = self.call_links(&link.name, link.module, covered, usize::MAX, xs)?;
                covered = 0;
                i += 1;
                continue;
            }
            let range = ranges.iter().find(|r| r.start == i);
            let step = step_at(&links, i, n, untouched);
            xs = step.before(parent, self, xs)?;
            let end = range.map_or(step.end(i), |r| r.end);
            // The last step gives the container's outputs: unread when the container's are.
            self.unread_next = end >= n && self.unread_call;
            self.final_next = end >= n;
            xs = match range {
                Some(r) => {
                    covered = r.into_next;
                    self.call_child_run(parent, r.start, r.end, r.into_next, xs)?
                }
                None => step.run(self, xs)?,
            };
            i = end;
        }
        Ok(xs)
    }

    /// Calls child `name` running only links `from..to` of its chain (clamped to its length):
    /// the child must run its children through [`Cx::call_children`]
    /// ([`Module::supports_child_ranges`]), which an error says otherwise.
    pub(crate) fn call_links(
        &mut self,
        name: &str,
        module: &'m dyn Module,
        from: usize,
        to: usize,
        inputs: Vec<Var>,
    ) -> Result<Vec<Var>> {
        let _scope = enter_module(name);
        self.chain_window = Some((from, to));
        let out = self.call_here(module, inputs);
        if self.chain_window.take().is_some() {
            return Err(CheckpointError::Module {
                path: current_scope().module_path().to_string(),
                module: module.type_name().to_string(),
                message:
                    "it says it runs its children through Cx::call_children (supports_child_ranges), but its \
                          forward did not, so part of its chain cannot run on its own"
                        .into(),
            });
        }
        out
    }

    /// Runs links `start..end` of `parent`'s chain (the module of the current scope; see
    /// [`crate::module::chain_links`]), and the first `into_next` links of the child after them
    /// ([`crate::PlanEntry::into_next`]), as one segment under the policy assigned to that run,
    /// or one by one when it has none. `inputs` are link `start`'s (after
    /// [`Module::before_child`]); the run applies `before_child` to the later links itself.
    pub fn call_child_run(
        &mut self,
        parent: &'m dyn Module,
        start: usize,
        end: usize,
        into_next: usize,
        inputs: Vec<Var>,
    ) -> Result<Vec<Var>> {
        let path = current_scope().module_path().clone();
        let segment = Segment::Children {
            parent,
            start,
            end,
            into_next,
        };
        let policy = self
            .policies
            .child_ranges(&path)
            .iter()
            .find(|r| r.start == start && r.end == end)
            .map(|r| r.policy);
        match policy {
            Some(p) if self.is_recording() => {
                self.unread_next = false;
                crate::policy::checkpoint::forward(self, path, segment, inputs, p)
            }
            _ => segment.forward(self, inputs),
        }
    }
}
