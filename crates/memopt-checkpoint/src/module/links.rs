//! The chain of links of a container whose children form a chain: its direct children, with
//! the children of each child it inlines ([`PlannerHints::inlined_children`]) in that child's place.
//! Runs of children in plans (`PlanEntry::children`) count links, so a run may start or end
//! inside an inlined child: a VGG block inlines `proj_bn` (pool, convolution, BatchNorm), and
//! the run of its BatchNorm and its neuron keeps only the convolution's output for backward.

use super::Module;
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;

/// One link of a container's chain.
#[derive(Clone)]
pub struct ChainLink<'m> {
    /// Path relative to the container: the child's name, or `child.grandchild` for a child of
    /// an inlined child.
    pub name: String,
    /// The module.
    pub module: &'m dyn Module,
    /// Index of the direct child it is or belongs to.
    pub child: usize,
    /// For a child of an inlined child: its index there and the inlined child.
    pub inner: Option<(usize, &'m dyn Module)>,
}

impl<'m> ChainLink<'m> {
    /// The name of the direct child it is or belongs to (its path's first segment).
    pub fn child_name(&self) -> &str {
        self.name.split('.').next().unwrap_or_default()
    }

    /// For the first link of an inlined child: that child and one past its last link, given
    /// this link's index `i` among consecutive links of the chain.
    pub(crate) fn inlined_span(&self, i: usize) -> Option<(&'m dyn Module, usize)> {
        match self.inner {
            Some((0, owner)) => Some((owner, i + owner.child_count())),
            _ => None,
        }
    }
}

/// The links of `parent`'s chain, in order (its direct children when it inlines none).
pub fn chain_links(parent: &dyn Module) -> Vec<ChainLink<'_>> {
    chain_links_in(parent, 0, usize::MAX)
}

/// Links `start..end` of `parent`'s chain (clamped to its length).
pub fn chain_links_in(parent: &dyn Module, start: usize, end: usize) -> Vec<ChainLink<'_>> {
    let inlined = parent.inlined_children();
    if inlined.is_empty() {
        return parent
            .children_in(start, end)
            .into_iter()
            .enumerate()
            .map(|(i, (name, module))| ChainLink {
                name,
                module,
                child: start + i,
                inner: None,
            })
            .collect();
    }
    let mut out = Vec::new();
    for (child, (name, module)) in parent.children().into_iter().enumerate() {
        if inlined.contains(&child) {
            for (k, (inner_name, inner)) in module.children().into_iter().enumerate() {
                out.push(ChainLink {
                    name: format!("{name}.{inner_name}"),
                    module: inner,
                    child,
                    inner: Some((k, module)),
                });
            }
        } else {
            out.push(ChainLink {
                name,
                module,
                child,
                inner: None,
            });
        }
    }
    let end = end.min(out.len());
    out.truncate(end);
    out.drain(..start.min(end));
    out
}

/// Number of links in `parent`'s chain.
pub fn chain_link_count(parent: &dyn Module) -> usize {
    if parent.inlined_children().is_empty() {
        parent.child_count()
    } else {
        chain_links(parent).len()
    }
}

/// One thing a chain runs: a link on its own, or an inlined child whole (through
/// [`Cx::call`], so that its own policy applies).
pub(crate) enum ChainStep<'a, 'm> {
    /// One link.
    Link(&'a ChainLink<'m>),
    /// An inlined child, whole.
    Inlined {
        /// Its first link.
        first: &'a ChainLink<'m>,
        /// One past its last link.
        end: usize,
    },
}

/// The step starting at link `i` of `links` (consecutive links of a chain, indexed from the
/// first of them): the inlined child whose first link it is, whole, when all its links lie
/// before `limit` and `whole(i, end)` holds; otherwise the link on its own.
pub(crate) fn step_at<'a, 'm>(
    links: &'a [ChainLink<'m>],
    i: usize,
    limit: usize,
    whole: impl Fn(usize, usize) -> bool,
) -> ChainStep<'a, 'm> {
    let link = &links[i];
    if let Some((_, end)) = link.inlined_span(i)
        && end <= limit
        && whole(i, end)
    {
        return ChainStep::Inlined { first: link, end };
    }
    ChainStep::Link(link)
}

impl<'m> ChainStep<'_, 'm> {
    /// One past the last link it runs.
    pub(crate) fn end(&self, index: usize) -> usize {
        match self {
            ChainStep::Link(_) => index + 1,
            ChainStep::Inlined { end, .. } => *end,
        }
    }

    /// What `parent` does to the values just before this step ([`PlannerHints::before_child`] of
    /// its direct child, when the step starts one).
    pub(crate) fn before(&self, parent: &'m dyn Module, cx: &mut Cx<'m>, xs: Vec<Var>) -> Forward<Vec<Var>> {
        let link = match self {
            ChainStep::Link(l) => l,
            ChainStep::Inlined { first, .. } => first,
        };
        match link.inner {
            None | Some((0, _)) => parent.before_child(cx, link.child, xs),
            Some(_) => Ok(xs),
        }
    }

    /// Runs the step in the container's scope: the inlined child through [`Cx::call`], a link
    /// of an inlined child after that child's [`PlannerHints::before_child`].
    pub(crate) fn run(&self, cx: &mut Cx<'m>, xs: Vec<Var>) -> Forward<Vec<Var>> {
        match self {
            ChainStep::Link(l) => {
                let xs = match l.inner {
                    Some((k, owner)) => owner.before_child(cx, k, xs)?,
                    None => xs,
                };
                cx.call(&l.name, l.module, xs)
            }
            ChainStep::Inlined { first, .. } => {
                let owner = first.inner.map_or(first.module, |(_, owner)| owner);
                cx.call(first.child_name(), owner, xs)
            }
        }
    }
}
