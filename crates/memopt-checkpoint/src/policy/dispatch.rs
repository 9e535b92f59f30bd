//! How module calls run under a plan's policies: the policy layer's side of
//! [`crate::context::Dispatch`]. A module runs as usual, with its saved spikes packed, or as a
//! checkpointed segment; a chain container's children run one by one, runs of consecutive
//! links as one segment under their policy, and the part of a child's chain that a run before
//! it did not cover ([`crate::PlanEntry::into_next`]).

use super::checkpoint;
use super::segment::{Segment, call_links};
use super::{Policy, PolicyTable};
use crate::Forward;
use crate::autograd::Var;
use crate::context::{Cx, Dispatch, Enter, Module};
use crate::module::links::{chain_links, step_at};
use memopt_core::ModulePath;
use memopt_core::memory::current_scope;

impl<'m> Dispatch<'m> for PolicyTable {
    fn run(
        &self,
        cx: &mut Cx<'m>,
        path: ModulePath,
        module: &'m dyn Module,
        inputs: Vec<Var>,
    ) -> Forward<Vec<Var>> {
        // Policies apply while recording; a forward without a tape stores nothing anyway.
        let policy = self.get(&path).copied().filter(|_| cx.is_recording());
        match policy {
            None | Some(Policy::Store) => module.forward(&mut cx.enter_call(), inputs),
            Some(Policy::StorePacked) => {
                let mut cx = cx.enter(Enter::PackedSaves(true));
                module.forward(&mut cx.enter_call(), inputs)
            }
            Some(policy @ (Policy::Checkpoint { .. } | Policy::Offload { .. })) => {
                // The segment runs without a tape and its outputs are the node's: the call
                // runs with its outputs read.
                cx.arm_unread(false);
                checkpoint::forward(
                    &mut cx.enter_call(),
                    path,
                    Segment::Module(module),
                    inputs,
                    policy,
                )
            }
        }
    }

    fn run_children(&self, cx: &mut Cx<'m>, parent: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        run_children(self, cx, parent, inputs)
    }

    fn run_child_range(
        &self,
        cx: &mut Cx<'m>,
        parent: &'m dyn Module,
        links: (usize, usize, usize),
        inputs: Vec<Var>,
    ) -> Forward<Vec<Var>> {
        run_child_range(self, cx, parent, links, inputs)
    }
}

/// Runs the children of `parent` (the module of the current scope, whose children form a
/// chain) one after the other, each on the previous one's outputs (passed through
/// [`PlannerHints::before_child`]), applying the policies assigned to runs of consecutive links
/// of its chain (plan entries with `children`; see [`crate::module::chain_links`]). An
/// inlined child that no run touches is called whole. A child that a run goes on into
/// ([`crate::PlanEntry::into_next`]) runs its remaining links after the run.
fn run_children<'m>(
    table: &PolicyTable,
    cx: &mut Cx<'m>,
    parent: &'m dyn Module,
    inputs: Vec<Var>,
) -> Forward<Vec<Var>> {
    let path = current_scope().module_path().clone();
    let window = cx.take_chain_window();
    let ranges = table.child_ranges(&path);
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
            let unread = i + 1 >= n && cx.outputs_unread();
            cx.arm_unread(unread);
            cx.arm_ends_parent(i + 1 >= n);
            xs = call_links(cx, &link.name, link.module, covered, usize::MAX, xs)?;
            covered = 0;
            i += 1;
            continue;
        }
        let range = ranges.iter().find(|r| r.start == i);
        let step = step_at(&links, i, n, untouched);
        xs = step.before(parent, cx, xs)?;
        let end = range.map_or(step.end(i), |r| r.end);
        // The last step gives the container's outputs: unread when the container's are.
        let unread = end >= n && cx.outputs_unread();
        cx.arm_unread(unread);
        cx.arm_ends_parent(end >= n);
        xs = match range {
            Some(r) => {
                covered = r.into_next;
                run_child_range(table, cx, parent, (r.start, r.end, r.into_next), xs)?
            }
            None => step.run(cx, xs)?,
        };
        i = end;
    }
    Ok(xs)
}

/// Runs links `start..end` of `parent`'s chain (the module of the current scope; see
/// [`crate::module::chain_links`]), and the first `into_next` links of the child after them
/// ([`crate::PlanEntry::into_next`]), as one segment under the policy assigned to that run,
/// or one by one when it has none. `inputs` are link `start`'s (after
/// [`PlannerHints::before_child`]); the run applies `before_child` to the later links itself.
fn run_child_range<'m>(
    table: &PolicyTable,
    cx: &mut Cx<'m>,
    parent: &'m dyn Module,
    (start, end, into_next): (usize, usize, usize),
    inputs: Vec<Var>,
) -> Forward<Vec<Var>> {
    let path = current_scope().module_path().clone();
    let segment = Segment::Children {
        parent,
        start,
        end,
        into_next,
    };
    let policy = table
        .child_ranges(&path)
        .iter()
        .find(|r| r.start == start && r.end == end)
        .map(|r| r.policy);
    match policy {
        Some(p) if cx.is_recording() => {
            cx.arm_unread(false);
            checkpoint::forward(cx, path, segment, inputs, p)
        }
        _ => segment.forward(cx, inputs),
    }
}
