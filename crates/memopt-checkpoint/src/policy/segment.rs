//! What a checkpoint node runs and recomputes: one module, or a run of consecutive children of
//! a chain container (so that several layers share one saved input).

use crate::Result;
use crate::autograd::Var;
use crate::context::Cx;
use crate::module::links::step_at;
use crate::module::{Module, batch_statistics_in, chain_links, chain_links_in, time_coupling_in};
use memopt_core::ModulePath;

/// A module, or links `start..end` of the chain of a container whose children form a chain
/// (its children, with those of the children it inlines; see [`chain_links`]).
#[derive(Clone, Copy)]
pub(crate) enum Segment<'m> {
    /// One module.
    Module(&'m dyn Module),
    /// Consecutive links of `parent`'s chain.
    Children {
        /// The chain container.
        parent: &'m dyn Module,
        /// First link (index).
        start: usize,
        /// One past the last link.
        end: usize,
    },
}

impl<'m> Segment<'m> {
    /// Type as shown in errors: `Conv2d`, or `Sequential[2..5]`.
    pub(crate) fn type_name(&self) -> String {
        match self {
            Segment::Module(m) => m.type_name().to_string(),
            Segment::Children { parent, start, end } => format!("{}[{start}..{end}]", parent.type_name()),
        }
    }

    /// The forward pass (the policy of the segment itself is not applied again; policies of
    /// modules inside are). When the caller armed unread outputs ([`Cx::outputs_unread`]), the
    /// module, or the last child of the run, gets them.
    pub(crate) fn forward(&self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Result<Vec<Var>> {
        match *self {
            Segment::Module(m) => cx.with_armed_call(|cx| m.forward(cx, inputs)),
            Segment::Children { parent, start, end } => {
                let unread = cx.take_output_unread();
                let ends_parent = cx.take_ends_parent();
                let links = chain_links(parent);
                let end = end.min(links.len());
                let mut xs = inputs;
                let mut i = start;
                while i < end {
                    let step = step_at(&links, i, end, |_, _| true);
                    if i > start {
                        xs = step.before(parent, cx, xs)?;
                    }
                    let next = step.end(i);
                    cx.arm_unread(unread && next >= end);
                    cx.arm_ends_parent(ends_parent && next >= end);
                    xs = step.run(cx, xs)?;
                    i = next;
                }
                Ok(xs)
            }
        }
    }

    /// Path prefixes of the stateful modules the segment may run, given the scope path it runs
    /// in (the module's own path, or the container's).
    pub(crate) fn state_prefixes(&self, path: &ModulePath) -> Vec<ModulePath> {
        match *self {
            Segment::Module(_) => vec![path.clone()],
            Segment::Children { parent, start, end } => chain_links_in(parent, start, end)
                .into_iter()
                .map(|l| path.child(&l.name))
                .collect(),
        }
    }

    /// The first module inside that cannot run on part of the time steps, with the reason.
    pub(crate) fn time_coupling(&self, path: &str, training: bool) -> Option<(String, String)> {
        match *self {
            Segment::Module(m) => time_coupling_in(m, path, training),
            Segment::Children { parent, start, end } => chain_links_in(parent, start, end)
                .into_iter()
                .find_map(|l| time_coupling_in(l.module, &ModulePath::from(path).child(&l.name), training)),
        }
    }

    /// The modules inside that normalise with whole-batch statistics in this mode (training
    /// BatchNorms), given the scope path the segment runs in.
    pub(crate) fn batch_statistics(&self, path: &ModulePath, training: bool) -> Vec<ModulePath> {
        match *self {
            Segment::Module(m) => batch_statistics_in(m, path, training),
            Segment::Children { parent, start, end } => chain_links_in(parent, start, end)
                .into_iter()
                .flat_map(|l| batch_statistics_in(l.module, &path.child(&l.name), training))
                .collect(),
        }
    }
}
