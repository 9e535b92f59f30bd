//! What a checkpoint node runs and recomputes: one module, or a run of consecutive children of
//! a chain container (so that several layers share one saved input).

use crate::CheckpointError;
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::module::links::step_at;
use crate::module::{Module, batch_statistics_in, chain_links_in, time_coupling_in};
use memopt_core::ModulePath;
use memopt_core::memory::{current_scope, enter_module};

/// A module, or links `start..end` of the chain of a container whose children form a chain
/// (its children, with those of the children it inlines; see
/// [`crate::module::chain_links`]), and the first `into_next` links of the child after them.
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
        /// Links of the next child's chain (link `end`, a direct child) the segment also runs,
        /// from its first ([`crate::PlanEntry::into_next`]).
        into_next: usize,
    },
}

impl<'m> Segment<'m> {
    /// Type as shown in errors: `Conv2d`, or `Sequential[2..5]`.
    pub(crate) fn type_name(&self) -> String {
        match self {
            Segment::Module(m) => m.type_name().to_string(),
            Segment::Children {
                parent,
                start,
                end,
                into_next,
            } => super::run_target(parent.type_name(), Some([*start, *end]), *into_next),
        }
    }

    /// The links the segment runs, each with its path relative to the scope it runs in: the
    /// run's links, then the next child's first `into_next` (`child.link`).
    fn links(&self) -> Vec<(String, &'m dyn Module)> {
        match *self {
            Segment::Module(_) => Vec::new(),
            Segment::Children {
                parent,
                start,
                end,
                into_next,
            } => {
                let mut out: Vec<(String, &'m dyn Module)> = chain_links_in(parent, start, end)
                    .into_iter()
                    .map(|l| (l.name, l.module))
                    .collect();
                if into_next > 0
                    && let Some(next) = chain_links_in(parent, end, end + 1).pop()
                {
                    out.extend(
                        chain_links_in(next.module, 0, into_next)
                            .into_iter()
                            .map(|l| (format!("{}.{}", next.name, l.name), l.module)),
                    );
                }
                out
            }
        }
    }

    /// The forward pass (the policy of the segment itself is not applied again; policies of
    /// modules inside are). When the caller armed unread outputs ([`Cx::outputs_unread`]), the
    /// module, or the last child of the run, gets them.
    pub(crate) fn forward(&self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        match *self {
            Segment::Module(m) => m.forward(&mut cx.enter_call(), inputs),
            Segment::Children {
                parent,
                start,
                end,
                into_next,
            } => {
                let unread = cx.take_output_unread();
                let ends_parent = cx.take_ends_parent();
                // Only the run's links (a long Sequential's runs cost their own length).
                let links = chain_links_in(parent, start, end);
                let n = links.len();
                let last_here = into_next == 0;
                let mut xs = inputs;
                let mut i = 0;
                while i < n {
                    let step = step_at(&links, i, n, |_, _| true);
                    if i > 0 {
                        xs = step.before(parent, cx, xs)?;
                    }
                    let next = step.end(i);
                    cx.arm_unread(unread && last_here && next >= n);
                    cx.arm_ends_parent(ends_parent && last_here && next >= n);
                    xs = step.run(cx, xs)?;
                    i = next;
                }
                if into_next > 0 {
                    // Validated by the plan: link `end` is a direct child running its chain.
                    let next = chain_links_in(parent, end, end + 1).pop().ok_or_else(|| {
                        CheckpointError::Autograd(format!(
                            "a run going on into child {end} of {} found no such child",
                            parent.type_name()
                        ))
                    })?;
                    xs = parent.before_child(cx, next.child, xs)?;
                    cx.arm_unread(unread);
                    xs = call_links(cx, &next.name, next.module, 0, into_next, xs)?;
                }
                Ok(xs)
            }
        }
    }

    /// The paths of the modules the segment runs at its top (the module, or the run's links),
    /// given the scope path it runs in.
    pub(crate) fn module_paths(&self, path: &ModulePath) -> Vec<ModulePath> {
        match *self {
            Segment::Module(_) => vec![path.clone()],
            Segment::Children { .. } => self
                .links()
                .into_iter()
                .map(|(name, _)| path.child(&name))
                .collect(),
        }
    }

    /// Path prefixes of the stateful modules the segment may run, given the scope path it runs
    /// in (the module's own path, or the container's).
    pub(crate) fn state_prefixes(&self, path: &ModulePath) -> Vec<ModulePath> {
        self.module_paths(path)
    }

    /// The first module inside that cannot run on part of the time steps, with the reason.
    pub(crate) fn time_coupling(&self, path: &str, training: bool) -> Option<(String, String)> {
        match *self {
            Segment::Module(m) => time_coupling_in(m, path, training),
            Segment::Children { .. } => self
                .links()
                .into_iter()
                .find_map(|(name, m)| time_coupling_in(m, &ModulePath::from(path).child(&name), training)),
        }
    }

    /// Whether a chunked run of the segment may keep its first training BatchNorm's input for
    /// its later forward passes ([`crate::BatchNormInputs::Kept`]), given the scope path it runs
    /// in: it has one, and every module called before it (in call order; at least one layer)
    /// is a stateless layer or a container running its children as a chain, so that skipping
    /// them changes nothing but the time. `Ok` gives the paths of the modules on the way: those
    /// passes skip whole, the first BatchNorm and the modules enclosing it (no other entry may
    /// recompute one of them: its own forward would skip or keep nothing); `Err` says why not.
    pub(crate) fn batch_norm_inputs_keepable(
        &self,
        path: &ModulePath,
        training: bool,
    ) -> std::result::Result<Vec<ModulePath>, String> {
        if self.batch_statistics(path, training).is_empty() {
            return Err("it has no training BatchNorm".into());
        }
        let modules: Vec<(ModulePath, &dyn Module)> = match *self {
            Segment::Module(m) => vec![(path.clone(), m)],
            Segment::Children { .. } => self
                .links()
                .into_iter()
                .map(|(name, m)| (path.child(&name), m))
                .collect(),
        };
        let mut way = WayToBatchNorm::default();
        for (p, m) in modules {
            if before_first_batch_norm(m, &p, training, &mut way)? {
                return if !way.skipped.is_empty() {
                    Ok(way.skipped.into_iter().chain(way.enclosing).collect())
                } else {
                    Err(
                        "it starts with its first BatchNorm, so its later passes have no layer to skip"
                            .into(),
                    )
                };
            }
        }
        Err("it has no training BatchNorm".into())
    }

    /// The modules inside that normalise with whole-batch statistics in this mode (training
    /// BatchNorms), given the scope path the segment runs in.
    pub(crate) fn batch_statistics(&self, path: &ModulePath, training: bool) -> Vec<ModulePath> {
        match *self {
            Segment::Module(m) => batch_statistics_in(m, path, training),
            Segment::Children { .. } => self
                .links()
                .into_iter()
                .flat_map(|(name, m)| batch_statistics_in(m, &path.child(&name), training))
                .collect(),
        }
    }
}

/// What a walk to the first training BatchNorm passed: the modules skipped whole before it,
/// and the BatchNorm with the modules enclosing it.
#[derive(Default)]
struct WayToBatchNorm {
    skipped: Vec<ModulePath>,
    enclosing: Vec<ModulePath>,
}

/// Walks `m` (at `path`) in call order up to the first training BatchNorm, noting in `way` the
/// modules skipped whole before it and, once found, the BatchNorm and the modules enclosing
/// it: `Ok(true)` when it has one and everything called before it may be skipped (stateless
/// leaves, chain containers), `Ok(false)` when it has none and may be skipped whole, `Err`
/// naming the module that may not be skipped.
fn before_first_batch_norm(
    m: &dyn Module,
    path: &ModulePath,
    training: bool,
    way: &mut WayToBatchNorm,
) -> std::result::Result<bool, String> {
    if m.batch_statistics(training) {
        way.enclosing.push(path.clone());
        return Ok(true);
    }
    let children = m.children();
    if children.is_empty() {
        if m.is_stateful() {
            return Err(format!(
                "{} '{path}' keeps a state across time steps and runs before the first BatchNorm",
                m.type_name()
            ));
        }
        way.skipped.push(path.clone());
        return Ok(false);
    }
    if !m.children_form_chain() {
        return Err(format!(
            "{} '{path}' does not run its children as a chain and runs before the first BatchNorm",
            m.type_name()
        ));
    }
    for (name, child) in children {
        if before_first_batch_norm(child, &path.child(&name), training, way)? {
            way.enclosing.push(path.clone());
            return Ok(true);
        }
    }
    way.skipped.push(path.clone());
    Ok(false)
}

/// Calls child `name` running only links `from..to` of its chain (clamped to its length):
/// the child must run its children through [`Cx::call_children`]
/// ([`PlannerHints::supports_child_ranges`]), which an error says otherwise.
pub(crate) fn call_links<'m>(
    cx: &mut Cx<'m>,
    name: &str,
    module: &'m dyn Module,
    from: usize,
    to: usize,
    inputs: Vec<Var>,
) -> Forward<Vec<Var>> {
    let _scope = enter_module(name);
    cx.set_chain_window((from, to));
    let out = cx.call_here(module, inputs);
    if cx.take_chain_window().is_some() {
        return Err(CheckpointError::Module {
            path: current_scope().module_path().to_string(),
            module: module.type_name().to_string(),
            message:
                "it says it runs its children through Cx::call_children (supports_child_ranges), but its \
                      forward did not, so part of its chain cannot run on its own"
                    .into(),
        }
        .into());
    }
    out
}
