//! The first implementation of [`super::plan_tree`], scanning the modules for every row
//! (quadratic and worse in the model's size): kept as the tests' oracle, which the indexed one
//! must match byte for byte.

use crate::format::path;
use memopt_checkpoint::module::ModuleInfo;
use memopt_checkpoint::{Plan, Policy};
use memopt_core::ModulePath;

fn is_ancestor(a: &str, p: &str) -> bool {
    ModulePath::from(p).is_below(a)
}

fn parent(p: &str) -> Option<ModulePath> {
    ModulePath::from(p).parent()
}

/// The position of `m` among the children of `par` (its parent), in `modules`' order (the
/// modules' forward order, whatever the children are named).
fn child_index(modules: &[ModuleInfo], m: &ModuleInfo, par: &ModulePath) -> Option<usize> {
    modules
        .iter()
        .filter(|c| c.depth == m.depth && parent(&c.path).as_ref() == Some(par))
        .position(|c| c.path == m.path)
}

/// The position of `m` in the chain of the container at `container`: among its children, or
/// among its links when it inlines children ([`ModuleInfo::links`]).
fn link_index(modules: &[ModuleInfo], m: &ModuleInfo, container: &str) -> Option<usize> {
    let c = modules.iter().find(|c| c.path == container)?;
    if c.links.is_empty() {
        let par = parent(&m.path)?;
        return (par.as_str() == container)
            .then(|| child_index(modules, m, &par))
            .flatten();
    }
    let relative = if container.is_empty() {
        m.path.as_str()
    } else {
        m.path.strip_prefix(container)?.strip_prefix('.')?
    };
    c.links.iter().position(|l| l == relative)
}

/// The module tree of `modules` (from [`memopt_checkpoint::Model::modules`]) with `plan`'s
/// policies: the top level, every planned module with its ancestors and siblings (so what is
/// stored next to it shows), nothing below a planned module (its policy covers it). Runs of
/// children that share one checkpoint are marked on their first child.
pub(super) fn plan_tree(modules: &[ModuleInfo], plan: &Plan) -> String {
    let planned = |p: &str| -> Option<Policy> {
        plan.entries
            .iter()
            .find(|e| e.path == p && e.children.is_none())
            .map(|e| e.policy)
    };
    // The child a run goes on into (`into_next`), by entry.
    let next_child = |e: &memopt_checkpoint::PlanEntry| -> Option<String> {
        let [_, b] = e.children.filter(|_| e.into_next > 0)?;
        let m = modules.iter().find(|m| {
            parent(&m.path).is_some_and(|p| p.as_str() == e.path)
                && link_index(modules, m, &e.path) == Some(b)
        })?;
        Some(m.path.clone())
    };
    // Containers whose children are addressed: module entries' parents, run entries' paths
    // (and the child a run goes on into).
    let mut opened: Vec<ModulePath> = Vec::new();
    let open_chain = |container: &str, opened: &mut Vec<ModulePath>| {
        let container = ModulePath::from(container);
        // A container that inlines children: their children are its links.
        let links = modules
            .iter()
            .find(|m| m.path == container.as_str())
            .map(|m| m.links.as_slice());
        for link in links.unwrap_or_default() {
            opened.extend(container.child(link).parent().filter(|p| *p != container));
        }
        opened.push(container);
    };
    for e in &plan.entries {
        match e.children {
            Some(_) => {
                open_chain(&e.path, &mut opened);
                if let Some(next) = next_child(e) {
                    open_chain(&next, &mut opened);
                }
            }
            None => opened.extend(parent(&e.path)),
        }
    }
    let visible = |m: &ModuleInfo| -> bool {
        let covered = plan
            .entries
            .iter()
            .any(|e| e.children.is_none() && is_ancestor(&e.path, &m.path));
        if covered {
            return false;
        }
        m.depth <= 1
            || planned(&m.path).is_some()
            || opened
                .iter()
                .any(|o| o.as_str() == m.path || is_ancestor(&m.path, o))
            || parent(&m.path).is_some_and(|p| opened.contains(&p))
    };
    let rows: Vec<(String, &str, String)> = modules
        .iter()
        .filter(|m| visible(m))
        .map(|m| {
            let name = format!("{}{}", "  ".repeat(m.depth), path(&m.path));
            let note = if let Some(p) = planned(&m.path) {
                p.to_string()
            } else if let Some((e, [a, b], i)) = plan.entries.iter().find_map(|e| match e.children {
                Some([a, b]) if is_ancestor(&e.path, &m.path) => {
                    let i = link_index(modules, m, &e.path)?;
                    (a..b).contains(&i).then_some((e, [a, b], i))
                }
                _ => None,
            }) {
                if i == a && e.into_next > 0 {
                    let next = next_child(e).map(|p| path(&p).to_string()).unwrap_or_default();
                    let links = match e.into_next {
                        1 => format!("the first link of {next}"),
                        k => format!("the first {k} links of {next}"),
                    };
                    format!(
                        "{} over children {a}..{} and {links} as one segment",
                        e.policy,
                        b - 1
                    )
                } else if i == a {
                    format!("{} over children {a}..{} as one segment", e.policy, b - 1)
                } else {
                    "  (same segment)".to_string()
                }
            } else if plan.entries.iter().any(|e| {
                next_child(e).is_some_and(|next| {
                    is_ancestor(&next, &m.path)
                        && link_index(modules, m, &next).is_some_and(|i| i < e.into_next)
                })
            }) {
                "  (same segment)".to_string()
            } else if opened
                .iter()
                .any(|o| o.as_str() == m.path || is_ancestor(&m.path, o))
            {
                String::new()
            } else {
                "store".to_string()
            };
            (name, m.type_name, note)
        })
        .collect();
    super::rows_text(rows)
}
