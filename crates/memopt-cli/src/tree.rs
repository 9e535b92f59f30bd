//! A plan as a readable tree: the model's modules, indented, each planned one with its policy.

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
pub fn plan_tree(modules: &[ModuleInfo], plan: &Plan) -> String {
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
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, ty, note) in rows {
        let line = format!("  {name:<w0$}  {ty:<w1$}  {note}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memopt_checkpoint::zoo;
    use memopt_core::{Device, MemoryTracker};

    /// The line of `tree` for module `p`.
    fn line_of(tree: &str, p: &str) -> String {
        tree.lines()
            .find(|l| l.split_whitespace().next() == Some(p))
            .unwrap_or_else(|| panic!("no line for {p} in\n{tree}"))
            .to_string()
    }

    fn vgg_modules() -> Vec<ModuleInfo> {
        let _t = MemoryTracker::install(MemoryTracker::new(Device::META));
        let spec = zoo::entry("cifar10dvs-vgg").unwrap().small;
        zoo::build("cifar10dvs-vgg", &spec, Device::META, 0)
            .unwrap()
            .modules()
    }

    #[test]
    fn planned_modules_show_their_policy_and_siblings() {
        let modules = vgg_modules();
        let plan = Plan::from_entries([
            ("features.3", Policy::CHECKPOINT),
            ("features.5.neuron", Policy::CHECKPOINT),
        ]);
        let tree = plan_tree(&modules, &plan);
        let line = |p: &str| line_of(&tree, p);
        assert!(
            line("features.3").contains("VGGBlock") && line("features.3").ends_with("checkpoint(bit_spike)")
        );
        assert!(line("features.2").ends_with("store"));
        assert!(line("features.5.neuron").ends_with("checkpoint(bit_spike)"));
        assert!(line("features.5.proj_bn").ends_with("store"));
        assert!(line("classifier").ends_with("store"));
        assert!(
            !tree.contains("features.3.neuron"),
            "nothing below a planned module:\n{tree}"
        );
        assert!(
            !tree.contains("features.2.neuron"),
            "unplanned blocks stay folded:\n{tree}"
        );
        assert!(line("(root)").contains("Sequential"));
    }

    #[test]
    fn runs_of_children_are_marked_on_their_first_child() {
        let modules = vgg_modules();
        let mut plan = Plan::store_all();
        plan.entries.push(memopt_checkpoint::PlanEntry {
            path: "features".into(),
            children: Some([2, 5]),
            into_next: 0,
            policy: Policy::CHECKPOINT,
        });
        let tree = plan_tree(&modules, &plan);
        assert!(
            tree.contains("checkpoint(bit_spike) over children 2..4 as one segment"),
            "{tree}"
        );
        assert_eq!(tree.matches("(same segment)").count(), 2, "{tree}");
    }

    #[test]
    fn runs_of_named_children_are_marked_too() {
        let _t = MemoryTracker::install(MemoryTracker::new(Device::META));
        let spec = zoo::entry("sew-resnet18").unwrap().small;
        let modules = zoo::build("sew-resnet18", &spec, Device::META, 0)
            .unwrap()
            .modules();
        let mut plan = Plan::store_all();
        plan.entries.push(memopt_checkpoint::PlanEntry {
            path: String::new(),
            children: Some([0, 4]),
            into_next: 0,
            policy: Policy::CHECKPOINT,
        });
        let tree = plan_tree(&modules, &plan);
        let line = |p: &str| line_of(&tree, p);
        assert!(
            line("conv1").ends_with("checkpoint(bit_spike) over children 0..3 as one segment"),
            "{tree}"
        );
        assert_eq!(tree.matches("(same segment)").count(), 3, "{tree}");
        assert!(line("layer1").ends_with("store"), "{tree}");
    }

    #[test]
    fn runs_through_an_inlined_child_are_marked_on_its_links() {
        // The VGG block inlines proj_bn: links 1..3 of features.3 are its BatchNorm and neuron.
        let modules = vgg_modules();
        let mut plan = Plan::store_all();
        plan.entries.push(memopt_checkpoint::PlanEntry {
            path: "features.3".into(),
            children: Some([1, 3]),
            into_next: 0,
            policy: Policy::CHECKPOINT,
        });
        let tree = plan_tree(&modules, &plan);
        let line = |p: &str| line_of(&tree, p);
        assert!(
            line("features.3.proj_bn.1").ends_with("checkpoint(bit_spike) over children 1..2 as one segment"),
            "{tree}"
        );
        assert!(line("features.3.neuron").ends_with("(same segment)"), "{tree}");
        assert!(line("features.3.proj_bn.0").ends_with("store"), "{tree}");
        assert_eq!(tree.matches("(same segment)").count(), 1, "{tree}");
    }

    #[test]
    fn a_run_into_the_next_child_marks_its_first_links() {
        // Block 1 and block 2's pool (the first link of features.2's chain) as one segment.
        let modules = vgg_modules();
        let mut plan = Plan::store_all();
        plan.entries.push(memopt_checkpoint::PlanEntry {
            path: "features".into(),
            children: Some([1, 2]),
            into_next: 1,
            policy: Policy::CHECKPOINT,
        });
        let tree = plan_tree(&modules, &plan);
        let line = |p: &str| line_of(&tree, p);
        assert!(
            line("features.1").ends_with(
                "checkpoint(bit_spike) over children 1..1 and the first link of features.2 as one segment"
            ),
            "{tree}"
        );
        assert!(line("features.2.proj_bn.0").ends_with("(same segment)"), "{tree}");
        assert!(line("features.2.proj_bn.1").ends_with("store"), "{tree}");
        assert!(line("features.2.neuron").ends_with("store"), "{tree}");
        assert_eq!(tree.matches("(same segment)").count(), 1, "{tree}");
    }
}
