//! The policies in force, by module path, and their validation.

use super::segment::Segment;
use super::{BatchNormInputs, ChunkBoundaries, PLAN_VERSION, Plan, PlanEntry, Policy};
use crate::module::{Module, chain_link_count, chain_links, chain_links_in, find_module, module_infos};
use crate::{CheckpointError, Result};
use memopt_core::ModulePath;
use std::collections::BTreeMap;
use std::sync::Arc;

mod kept_inputs;

/// A policy for links `start..end` of a chain container (its children, with those of the
/// children it inlines: [`crate::module::chain_links`]), run as one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildRange {
    /// First link.
    pub start: usize,
    /// One past the last link.
    pub end: usize,
    /// Links of the next child's chain (child `end`) the run also covers, from its first (see
    /// [`PlanEntry::into_next`]).
    pub into_next: usize,
    /// The policy of the run.
    pub policy: Policy,
}

/// The policy of every module (and run of children) that is not stored, by path. Built from a
/// [`Plan`] by [`PolicyTable::from_plan`], which validates every entry before anything is
/// assigned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyTable {
    map: BTreeMap<Arc<str>, Policy>,
    ranges: BTreeMap<Arc<str>, Vec<ChildRange>>,
    update_in_backward: bool,
}

/// What validation needs to know about the run a plan is for.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// Whether modules run in training mode.
    pub training: bool,
    /// Time steps of the input, when known.
    pub time_steps: Option<usize>,
}

impl PolicyTable {
    /// Whether the optimizer updates each parameter during backward ([`Plan::update_in_backward`]).
    pub fn updates_in_backward(&self) -> bool {
        self.update_in_backward
    }

    /// The policy assigned to `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Policy> {
        self.map.get(path)
    }

    /// The runs of children of `path` with a policy, by start.
    pub fn child_ranges(&self, path: &str) -> &[ChildRange] {
        self.ranges.get(path).map_or(&[], Vec::as_slice)
    }

    /// Module assignments in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Policy)> {
        self.map.iter().map(|(k, v)| (&**k, v))
    }

    /// Number of entries (modules and runs of children) with a policy other than store.
    pub fn len(&self) -> usize {
        self.map.len() + self.ranges.values().map(Vec::len).sum::<usize>()
    }

    /// Whether everything is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table as a plan (module entries in path order, then runs of children).
    pub fn to_plan(&self) -> Plan {
        let modules = self.map.iter().map(|(p, pol)| PlanEntry {
            path: p.to_string(),
            children: None,
            into_next: 0,
            policy: *pol,
        });
        let runs = self.ranges.iter().flat_map(|(p, rs)| {
            rs.iter().map(move |r| PlanEntry {
                path: p.to_string(),
                children: Some([r.start, r.end]),
                into_next: r.into_next,
                policy: r.policy,
            })
        });
        Plan {
            update_in_backward: self.update_in_backward,
            version: PLAN_VERSION,
            entries: modules.chain(runs).collect(),
        }
    }

    /// Validates `plan` against the module tree and builds the table. Errors name the entry:
    /// an unknown path (with look-alike suggestions), a duplicate or overlapping run, zero
    /// chunks, more chunks than time steps, chunking a segment whose modules couple time steps,
    /// or a run of children of a module whose children do not form a chain.
    pub fn from_plan(root: &dyn Module, plan: &Plan, run: RunShape) -> Result<PolicyTable> {
        if plan.version != PLAN_VERSION {
            return Err(CheckpointError::InvalidPlan(format!(
                "plan version {} is not supported (this build reads version {PLAN_VERSION})",
                plan.version
            )));
        }
        let mut table = PolicyTable {
            update_in_backward: plan.update_in_backward,
            ..PolicyTable::default()
        };
        // Store entries are not kept in the table, so duplicates are found here.
        let mut whole: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for e in &plan.entries {
            if e.children.is_none() && !whole.insert(e.path.as_str()) {
                return Err(CheckpointError::InvalidPlan(format!(
                    "path '{}' appears more than once",
                    e.path
                )));
            }
            table.insert(root, e, run)?;
        }
        table.check_inlined(root)?;
        table.check_into_next(root)?;
        table.check_kept_batch_norm_inputs(root, run)?;
        Ok(table)
    }

    /// Rejects what a run going on into the next child ([`PlanEntry::into_next`]) leaves
    /// impossible: a policy of that child itself (it no longer runs whole), a run of its links
    /// that starts before the covered ones, and a policy of a child it inlines that the covered
    /// links split.
    fn check_into_next(&self, root: &dyn Module) -> Result<()> {
        for (path, runs) in &self.ranges {
            for r in runs.iter().filter(|r| r.into_next > 0) {
                let target = super::run_target(path, Some([r.start, r.end]), r.into_next);
                let Some(parent) = find_module(root, path) else {
                    continue;
                };
                let Some(link) = chain_links_in(parent, r.end, r.end + 1).pop() else {
                    continue;
                };
                let next = ModulePath::from(&**path).child(&link.name);
                if self.map.contains_key(next.as_str()) {
                    return Err(CheckpointError::InvalidPlan(format!(
                        "{target} covers the first {} link(s) of '{next}', so '{next}' no longer runs whole and \
                         cannot take a policy of its own; drop its policy, or give runs of its links from link {} on",
                        r.into_next, r.into_next
                    )));
                }
                if let Some(o) = self
                    .child_ranges(next.as_str())
                    .iter()
                    .find(|o| o.start < r.into_next)
                {
                    return Err(CheckpointError::InvalidPlan(format!(
                        "{target} overlaps {next}[{}..{}]: the run covers that module's links 0..{}, so its runs \
                         must start at link {} or later",
                        o.start, o.end, r.into_next, r.into_next
                    )));
                }
                let links = chain_links(link.module);
                for (i, l) in links.iter().enumerate() {
                    let Some((_, b)) = l.inlined_span(i) else { continue };
                    let child = next.child(l.child_name());
                    if i < r.into_next
                        && r.into_next < b
                        && (self.map.contains_key(child.as_str()) || self.ranges.contains_key(child.as_str()))
                    {
                        return Err(CheckpointError::InvalidPlan(format!(
                            "{target} covers part of '{child}' (links {i}..{b} of '{next}'), so that module's \
                             children run one by one and '{child}' cannot take a policy of its own; drop its \
                             policy, or let the run cover all of its links or none"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Rejects a policy on an inlined child (see [`PlannerHints::inlined_children`]) that a run of
    /// its container's links covers only in part: its children then run one by one in its
    /// place, and its own policy could not apply.
    fn check_inlined(&self, root: &dyn Module) -> Result<()> {
        for (path, runs) in &self.ranges {
            let Some(module) = find_module(root, path).filter(|m| !m.inlined_children().is_empty()) else {
                continue;
            };
            let links = chain_links(module);
            for (i, link) in links.iter().enumerate() {
                let Some((_, b)) = link.inlined_span(i) else {
                    continue;
                };
                let a = i;
                let child = ModulePath::from(&**path).child(link.child_name());
                let has_own =
                    self.map.contains_key(child.as_str()) || self.ranges.contains_key(child.as_str());
                if let Some(r) = runs
                    .iter()
                    .find(|r| has_own && r.start < b && a < r.end && !(r.start <= a && b <= r.end))
                {
                    return Err(CheckpointError::InvalidPlan(format!(
                        "{path}[{}..{}] covers part of '{child}', which {} inlines (its links {a}..{b}), so \
                         that module's children run one by one and '{child}' cannot take a policy of its own; \
                         drop the policy of '{child}', or let the run cover all of its links or none",
                        r.start,
                        r.end,
                        module.type_name()
                    )));
                }
            }
        }
        Ok(())
    }

    fn insert(&mut self, root: &dyn Module, e: &PlanEntry, run: RunShape) -> Result<()> {
        check_entry(root, e, run)?;
        let path: Arc<str> = Arc::from(e.path.as_str());
        match e.children {
            None => {
                if self.map.contains_key(&path) {
                    return Err(CheckpointError::InvalidPlan(format!(
                        "path '{}' appears more than once",
                        e.path
                    )));
                }
                if e.policy != Policy::Store {
                    self.map.insert(path, e.policy);
                }
            }
            Some([start, end]) => {
                let runs = self.ranges.entry(path).or_default();
                // A run going on into the next child also occupies that child.
                let reach = |end: usize, into_next: usize| end + usize::from(into_next > 0);
                if let Some(o) = runs
                    .iter()
                    .find(|r| r.start < reach(end, e.into_next) && start < reach(r.end, r.into_next))
                {
                    return Err(CheckpointError::InvalidPlan(format!(
                        "{} overlaps {}; runs of children must not overlap",
                        e.target(),
                        super::run_target(&e.path, Some([o.start, o.end]), o.into_next)
                    )));
                }
                if e.policy != Policy::Store {
                    runs.push(ChildRange {
                        start,
                        end,
                        into_next: e.into_next,
                        policy: e.policy,
                    });
                    runs.sort_by_key(|r| r.start);
                }
            }
        }
        self.ranges.retain(|_, v| !v.is_empty());
        Ok(())
    }

    /// The table with `path`'s policy moved to the children its module names in
    /// [`crate::module::PlannerHints::split_children`] (SpikingJelly's spatial split). The path must hold a policy
    /// and have children.
    pub fn split(&self, root: &dyn Module, path: &str, run: RunShape) -> Result<PolicyTable> {
        let policy = *self.get(path).ok_or_else(|| {
            CheckpointError::InvalidPlan(format!("cannot split '{path}': it has no policy to move"))
        })?;
        let module = find_module(root, path).ok_or_else(|| unknown_path(root, path))?;
        let children = module
            .split_children()
            .unwrap_or_else(|| module.children().into_iter().map(|(n, _)| n).collect());
        if children.is_empty() {
            return Err(CheckpointError::InvalidPolicy {
                path: path.to_string(),
                module: module.type_name().to_string(),
                policy: policy.to_string(),
                reason: "it has no children to split into".into(),
            });
        }
        let mut next = self.clone();
        next.map.remove(path);
        for c in children {
            let child = ModulePath::from(path).child(&c);
            next = next.with(root, &child, policy, run)?;
        }
        Ok(next)
    }

    /// The table with `path` set to `policy` (validated).
    pub fn with(&self, root: &dyn Module, path: &str, policy: Policy, run: RunShape) -> Result<PolicyTable> {
        let entry = PlanEntry {
            path: path.to_string(),
            children: None,
            into_next: 0,
            policy,
        };
        check_entry(root, &entry, run)?;
        let mut next = self.clone();
        if policy == Policy::Store {
            next.map.remove(path);
        } else {
            next.map.insert(Arc::from(path), policy);
        }
        next.check_inlined(root)?;
        next.check_into_next(root)?;
        next.check_kept_batch_norm_inputs(root, run)?;
        Ok(next)
    }
}

fn check_entry(root: &dyn Module, e: &PlanEntry, run: RunShape) -> Result<()> {
    let module = find_module(root, &e.path).ok_or_else(|| unknown_path(root, &e.path))?;
    let segment = match e.children {
        None => Segment::Module(module),
        Some([start, end]) => Segment::Children {
            parent: module,
            start,
            end,
            into_next: e.into_next,
        },
    };
    let invalid = |reason: String| CheckpointError::InvalidPolicy {
        path: e.target(),
        module: segment.type_name(),
        policy: e.policy.to_string(),
        reason,
    };
    if let Some([start, end]) = e.children {
        let n = chain_link_count(module);
        if !module.supports_child_ranges() {
            return Err(invalid(format!(
                "{} does not run its children as a chain that plans can split into runs (Sequential does)",
                module.type_name()
            )));
        }
        if start >= end || end > n {
            let counted = if module.inlined_children().is_empty() {
                ""
            } else {
                " (its chain's links: its children, with those of the children it inlines)"
            };
            return Err(invalid(format!(
                "a run of children needs 0 <= start < end <= {n}{counted}"
            )));
        }
        if e.into_next > 0 {
            check_into_next(module, e, n).map_err(invalid)?;
        }
    } else if e.into_next > 0 {
        return Err(invalid(
            "\"into_next\" continues a run of children into the next child; give \"children\" too, or drop it".into(),
        ));
    }
    if e.policy.recomputes() {
        let (chunks, boundaries) = (e.policy.chunks(), e.policy.boundaries());
        if chunks == 0 {
            return Err(invalid("chunks must be at least 1".into()));
        }
        if chunks == 1 && !boundaries.is_kept() {
            return Err(invalid(
                "replayed boundaries need time chunks (chunks >= 2): one chunk has no boundary; drop \"boundaries\" \
                 or give \"chunks\""
                    .into(),
            ));
        }
        if boundaries == ChunkBoundaries::KeptEvery(0) {
            return Err(invalid(
                "\"kept_every\" must be at least 1 (1 keeps every boundary, as \"kept\"; k replays all, as \"replayed\")"
                    .into(),
            ));
        }
        if e.policy.batch_norm_inputs() == BatchNormInputs::Kept {
            if chunks == 1 {
                return Err(invalid(
                    "kept BatchNorm inputs need time chunks (chunks >= 2): one chunk computes its statistics in \
                     its only pass; drop \"batch_norm_inputs\" or give \"chunks\""
                        .into(),
                ));
            }
            if let Err(why) =
                segment.batch_norm_inputs_keepable(&ModulePath::from(e.path.as_str()), run.training)
            {
                return Err(invalid(format!(
                    "it cannot keep its BatchNorm inputs: {why}; drop \"batch_norm_inputs\" (recomputed) or \
                     keep them for a segment that starts with its layers before a BatchNorm"
                )));
            }
        }
        if chunks > 1 {
            if let Some(t) = run.time_steps
                && chunks > t
            {
                return Err(invalid(format!(
                    "{chunks} chunks exceed the {t} time steps of the input (valid: 1..={t})"
                )));
            }
            if let Some((who, why)) = segment.time_coupling(&e.path, run.training) {
                return Err(invalid(format!(
                    "it cannot be chunked over time because it contains {who}: {why}; give it chunks = 1 \
                     or chunk a smaller segment"
                )));
            }
        }
    }
    Ok(())
}

/// Why a run of `parent`'s links cannot go on into the next child, if it cannot: the next
/// link must be a direct child that runs its children as a chain (not a link of an inlined
/// child), and `into_next` must leave at least one of its links out (covering all of them is
/// the run one child longer).
fn check_into_next(parent: &dyn Module, e: &PlanEntry, n: usize) -> std::result::Result<(), String> {
    let Some([_, end]) = e.children else {
        return Ok(());
    };
    let Some(link) = chain_links_in(parent, end, end + 1).pop() else {
        return Err(format!(
            "\"into_next\" needs a child after the run, but the run ends at the last of the {n} links"
        ));
    };
    if link.inner.is_some() {
        return Err(format!(
            "link {end} ('{}') belongs to a child that {} inlines; \"into_next\" goes on into a direct child only \
             (end the run on that child's links instead)",
            link.name,
            parent.type_name()
        ));
    }
    if !(link.module.supports_child_ranges() && link.module.children_form_chain()) {
        return Err(format!(
            "the next child '{}' ({}) does not run its children as a chain, so a run cannot go on into it",
            link.name,
            link.module.type_name()
        ));
    }
    let m = chain_link_count(link.module);
    if e.into_next >= m {
        return Err(format!(
            "\"into_next\" {} covers all {m} links of the next child '{}'; valid: 1..={} (for all of them, \
             end the run one child later)",
            e.into_next,
            link.name,
            m.saturating_sub(1)
        ));
    }
    Ok(())
}

/// The error for a path that does not exist, with up to three look-alike paths.
pub(crate) fn unknown_path(root: &dyn Module, path: &str) -> CheckpointError {
    let mut scored: Vec<(usize, String)> = module_infos(root)
        .into_iter()
        .filter(|i| !i.path.is_empty())
        .map(|i| (edit_distance(&i.path, path), i.path))
        .collect();
    scored.sort();
    let limit = (path.len() / 3).max(2);
    CheckpointError::UnknownPath {
        path: path.to_string(),
        suggestions: scored
            .into_iter()
            .take_while(|(d, _)| *d <= limit)
            .take(3)
            .map(|(_, p)| p)
            .collect(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
