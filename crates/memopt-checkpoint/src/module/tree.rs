//! Walking the module tree by path.

use super::Module;
use crate::param::{Buffer, Param};
use memopt_core::ModulePath;

/// One node of the module tree, as listed by [`module_infos`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Dot-separated path (`""` for the root).
    pub path: String,
    /// Type name.
    pub type_name: &'static str,
    /// Depth below the root (root = 0).
    pub depth: usize,
    /// Number of direct children.
    pub children: usize,
    /// Parameters of this module and its descendants, in elements.
    pub param_elems: usize,
    /// Whether the module is a spiking neuron.
    pub stateful: bool,
    /// For a module that inlines children ([`crate::module::PlannerHints::inlined_children`]): the relative paths of
    /// its chain's links, which runs of children count (`proj_bn.2`); empty otherwise.
    pub links: Vec<String>,
}

fn walk<'a>(
    m: &'a dyn Module,
    path: ModulePath,
    depth: usize,
    f: &mut dyn FnMut(&ModulePath, usize, &'a dyn Module),
) {
    f(&path, depth, m);
    for (name, child) in m.children() {
        walk(child, path.child(&name), depth + 1, f);
    }
}

/// Every module of the tree in pre-order (parents before children, children in order).
pub fn module_infos(root: &dyn Module) -> Vec<ModuleInfo> {
    let mut out = Vec::new();
    walk(root, ModulePath::root(), 0, &mut |path, depth, m| {
        out.push(ModuleInfo {
            path: path.to_string(),
            type_name: m.type_name(),
            depth,
            children: m.children().len(),
            param_elems: 0,
            stateful: m.is_stateful(),
            links: if m.inlined_children().is_empty() {
                Vec::new()
            } else {
                super::chain_links(m).into_iter().map(|l| l.name).collect()
            },
        })
    });
    for info in out.iter_mut() {
        if let Some(m) = find_module(root, &info.path) {
            info.param_elems = named_params(m).iter().map(|(_, p)| p.elem_count()).sum();
        }
    }
    out
}

/// The module at `path` (`""` is the root).
pub fn find_module<'a>(root: &'a dyn Module, path: &str) -> Option<&'a dyn Module> {
    if path.is_empty() {
        return Some(root);
    }
    let mut cur = root;
    for seg in path.split('.') {
        cur = cur.child(seg)?;
    }
    Some(cur)
}

/// Every parameter of the tree with its full path (`features.0.weight`), in pre-order.
pub fn named_params(root: &dyn Module) -> Vec<(String, &Param)> {
    let mut out = Vec::new();
    walk(root, ModulePath::root(), 0, &mut |path, _, m| {
        for (name, p) in m.params() {
            out.push((path.child(name).to_string(), p));
        }
    });
    out
}

/// Every buffer of the tree with its full path, in pre-order.
pub fn named_buffers(root: &dyn Module) -> Vec<(String, &Buffer)> {
    let mut out = Vec::new();
    walk(root, ModulePath::root(), 0, &mut |path, _, m| {
        for (name, b) in m.buffers() {
            out.push((path.child(name).to_string(), b));
        }
    });
    out
}

/// The first module at or below `root` (whose path is `root_path`) that cannot run on part of
/// the time steps, with the reason.
pub fn time_coupling_in(root: &dyn Module, root_path: &str, training: bool) -> Option<(String, String)> {
    let mut found = None;
    walk(root, ModulePath::from(root_path), 0, &mut |path, _, m| {
        if found.is_none()
            && let Some(reason) = m.time_coupling(training)
        {
            found = Some((format!("{} '{}'", m.type_name(), path), reason));
        }
    });
    found
}

/// The paths of the modules at or below `root` (whose path is `root_path`) that normalise with
/// whole-batch statistics in this mode ([`crate::module::PlannerHints::batch_statistics`]), in pre-order.
pub fn batch_statistics_in(root: &dyn Module, root_path: &ModulePath, training: bool) -> Vec<ModulePath> {
    let mut found = Vec::new();
    walk(root, root_path.clone(), 0, &mut |path, _, m| {
        if m.batch_statistics(training) {
            found.push(path.clone());
        }
    });
    found
}
