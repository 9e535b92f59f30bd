//! Indexes of a model's modules and a plan's runs, so [`super::plan_tree`] finds each row's
//! note by hashing the row's ancestors instead of scanning every module and entry (a model of
//! 5,000 layers, the most a description may have, prints in milliseconds rather than minutes).

use memopt_checkpoint::PlanEntry;
use memopt_checkpoint::module::ModuleInfo;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The paths `p` is strictly below, nearest first: its parent, its parent's parent, ..., the
/// root `""` (none for the root itself), as [`memopt_core::ModulePath::parent`] walks them.
pub(super) fn ancestors(p: &str) -> impl Iterator<Item = &str> {
    let mut cur = Some(p);
    std::iter::from_fn(move || {
        let c = cur.filter(|c| !c.is_empty())?;
        let parent = c.rsplit_once('.').map_or("", |(a, _)| a);
        cur = Some(parent);
        Some(parent)
    })
}

/// The parent of `p`; `None` for the root.
pub(super) fn parent(p: &str) -> Option<&str> {
    ancestors(p).next()
}

/// The modules of a model (in forward order), indexed by path and by position in their
/// container's chain.
pub(super) struct Modules<'a> {
    modules: &'a [ModuleInfo],
    /// The first module of each path.
    by_path: HashMap<&'a str, usize>,
    /// Per module: its position among the modules of its depth with its parent (in order).
    child_pos: Vec<usize>,
    /// `(parent, position)`: the first module with that parent at that position.
    child_at: HashMap<(&'a str, usize), usize>,
    /// Per container that inlines children (by its first module): each link's first position.
    link_pos: HashMap<usize, HashMap<&'a str, usize>>,
    /// Per path: how many modules have it as their parent.
    children: HashMap<&'a str, usize>,
}

impl<'a> Modules<'a> {
    /// Indexes `modules` (from [`memopt_checkpoint::Model::modules`]).
    pub(super) fn new(modules: &'a [ModuleInfo]) -> Self {
        let mut by_path = HashMap::new();
        for (i, m) in modules.iter().enumerate() {
            by_path.entry(m.path.as_str()).or_insert(i);
        }
        let mut counts: HashMap<(&str, usize), usize> = HashMap::new();
        let mut first_pos: HashMap<(&str, usize), usize> = HashMap::new();
        let mut children: HashMap<&str, usize> = HashMap::new();
        let mut child_pos = vec![0; modules.len()];
        let mut child_at = HashMap::new();
        for (i, m) in modules.iter().enumerate() {
            let Some(par) = parent(&m.path) else { continue };
            *children.entry(par).or_default() += 1;
            let count = counts.entry((par, m.depth)).or_default();
            let pos = *first_pos.entry((m.path.as_str(), m.depth)).or_insert(*count);
            *count += 1;
            child_pos[i] = pos;
            child_at.entry((par, pos)).or_insert(i);
        }
        let link_pos = by_path
            .values()
            .filter(|&&c| !modules[c].links.is_empty())
            .map(|&c| {
                let mut pos = HashMap::new();
                for (k, l) in modules[c].links.iter().enumerate() {
                    pos.entry(l.as_str()).or_insert(k);
                }
                (c, pos)
            })
            .collect();
        Modules {
            modules,
            by_path,
            child_pos,
            child_at,
            link_pos,
            children,
        }
    }

    /// The links of the (first) module at `container`: empty when there is none, or when it
    /// does not inline children.
    pub(super) fn links_of(&self, container: &str) -> &'a [String] {
        self.by_path
            .get(container)
            .map_or(&[], |&c| self.modules[c].links.as_slice())
    }

    /// How many positions the chain of `container` has (an upper bound of
    /// [`Modules::link_index`] there); `None` when no module has that path.
    pub(super) fn chain_len(&self, container: &str) -> Option<usize> {
        let c = *self.by_path.get(container)?;
        Some(match self.link_pos.get(&c) {
            Some(_) => self.modules[c].links.len(),
            None => self.children.get(container).copied().unwrap_or(0),
        })
    }

    /// The position of module `i` in the chain of the container at `container`: among its
    /// children (those of its depth, in order), or among its links when it inlines children
    /// ([`ModuleInfo::links`]).
    pub(super) fn link_index(&self, i: usize, container: &str) -> Option<usize> {
        let c = *self.by_path.get(container)?;
        let m = &self.modules[i];
        let Some(links) = self.link_pos.get(&c) else {
            return (parent(&m.path) == Some(container)).then(|| self.child_pos[i]);
        };
        let relative = if container.is_empty() {
            m.path.as_str()
        } else {
            m.path.strip_prefix(container)?.strip_prefix('.')?
        };
        links.get(relative).copied()
    }

    /// The child a run goes on into (`into_next`): the first module whose parent is the run's
    /// container and whose position in its chain is the run's end.
    pub(super) fn next_child(&self, e: &PlanEntry) -> Option<&'a str> {
        let [_, b] = e.children.filter(|_| e.into_next > 0)?;
        let c = *self.by_path.get(e.path.as_str())?;
        let i = match self.link_pos.get(&c) {
            None => *self.child_at.get(&(e.path.as_str(), b))?,
            Some(_) => {
                // Only the child whose path is the container's joined with link `b` can be
                // at position `b`.
                let link = self.modules[c].links.get(b)?;
                let joined = if e.path.is_empty() {
                    link.clone()
                } else {
                    format!("{}.{link}", e.path)
                };
                let i = *self.by_path.get(joined.as_str())?;
                let m = &self.modules[i];
                (parent(&m.path) == Some(e.path.as_str()) && self.link_index(i, &e.path) == Some(b))
                    .then_some(i)?
            }
        };
        Some(self.modules[i].path.as_str())
    }
}

/// Per chain position of one container, the first plan entry (by index) whose run covers it:
/// `runs` are `(start, end, entry)`, `len` the chain's length. A sweep over the positions with
/// the open runs in a heap by entry index: O((len + runs) log runs), whatever the runs overlap.
pub(super) fn first_run_per_position(mut runs: Vec<(usize, usize, usize)>, len: usize) -> Vec<Option<usize>> {
    runs.sort_unstable();
    let mut open = BinaryHeap::new();
    let mut next = 0;
    let mut first = Vec::with_capacity(len);
    for i in 0..len {
        while let Some(&(_, b, e)) = runs.get(next).filter(|r| r.0 <= i) {
            open.push(Reverse((e, b)));
            next += 1;
        }
        // A run ended below `i` that is not on top has a later entry than the top: ignored.
        while open.peek().is_some_and(|&Reverse((_, b))| b <= i) {
            open.pop();
        }
        first.push(open.peek().map(|&Reverse((e, _))| e));
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_are_the_paths_a_path_is_below() {
        assert_eq!(ancestors("a.b.c").collect::<Vec<_>>(), ["a.b", "a", ""]);
        assert_eq!(ancestors("a").collect::<Vec<_>>(), [""]);
        assert_eq!(ancestors("").count(), 0);
        for p in ["a.b.c", "x", "a..b", ".a"] {
            for a in ancestors(p) {
                assert!(memopt_core::ModulePath::from(p).is_below(a), "{p} below {a}");
            }
        }
    }

    #[test]
    fn the_first_entry_covering_each_position_wins() {
        // Entry 2 covers 0..4, entry 0 covers 2..3, entry 1 (empty) covers nothing.
        let first = first_run_per_position(vec![(0, 4, 2), (2, 3, 0), (1, 1, 1)], 6);
        assert_eq!(first, [Some(2), Some(2), Some(0), Some(2), None, None]);
    }
}
