//! A plan as a readable tree: the model's modules, indented, each planned one with its policy.

mod index;
#[cfg(test)]
mod reference;

use crate::format::path;
use index::{Modules, ancestors, first_run_per_position, parent};
use memopt_checkpoint::module::ModuleInfo;
use memopt_checkpoint::{Plan, Policy};
use memopt_core::ModulePath;
use std::collections::{HashMap, HashSet};

/// The module tree of `modules` (from [`memopt_checkpoint::Model::modules`]) with `plan`'s
/// policies: the top level, every planned module with its ancestors and siblings (so what is
/// stored next to it shows), nothing below a planned module (its policy covers it). Runs of
/// children that share one checkpoint are marked on their first child. Indexed: about
/// O((modules + entries) x depth) hash lookups.
pub fn plan_tree(modules: &[ModuleInfo], plan: &Plan) -> String {
    let ix = Modules::new(modules);
    let entries = &plan.entries;
    // The first policy of each planned module (entries of a module itself, not of a run).
    let mut planned: HashMap<&str, Policy> = HashMap::new();
    for e in entries.iter().filter(|e| e.children.is_none()) {
        planned.entry(e.path.as_str()).or_insert(e.policy);
    }
    // The child each run goes on into (`into_next`), by entry.
    let next: Vec<Option<&str>> = entries.iter().map(|e| ix.next_child(e)).collect();
    // Containers whose children are addressed: module entries' parents, run entries' paths
    // (and the child a run goes on into).
    let mut opened: HashSet<String> = HashSet::new();
    let open_chain = |container: &str, opened: &mut HashSet<String>| {
        let path = ModulePath::from(container);
        // A container that inlines children: their children are its links.
        for link in ix.links_of(container) {
            if let Some(p) = path.child(link).parent().filter(|p| *p != path) {
                opened.insert(p.as_str().to_string());
            }
        }
        opened.insert(container.to_string());
    };
    for (e, next) in entries.iter().zip(&next) {
        match e.children {
            Some(_) => {
                open_chain(&e.path, &mut opened);
                if let Some(next) = next {
                    open_chain(next, &mut opened);
                }
            }
            None => {
                opened.extend(parent(&e.path).map(str::to_string));
            }
        }
    }
    // The opened containers and their ancestors: a path is in it when it is an opened one or
    // above one (each path's ancestors go in with it).
    let mut above_opened: HashSet<&str> = HashSet::new();
    for o in &opened {
        for p in std::iter::once(o.as_str()).chain(ancestors(o)) {
            if !above_opened.insert(p) {
                break;
            }
        }
    }
    // Per container of runs: per chain position, the first entry whose run covers it.
    let mut runs: HashMap<&str, Vec<(usize, usize, usize)>> = HashMap::new();
    for (k, e) in entries.iter().enumerate() {
        if let Some([a, b]) = e.children {
            runs.entry(e.path.as_str()).or_default().push((a, b, k));
        }
    }
    let first_run: HashMap<&str, Vec<Option<usize>>> = runs
        .into_iter()
        .filter_map(|(c, runs)| Some((c, first_run_per_position(runs, ix.chain_len(c)?))))
        .collect();
    // Per child a run goes on into: the most links any run covers of it.
    let mut into_next: HashMap<&str, usize> = HashMap::new();
    for (e, next) in entries.iter().zip(&next) {
        if let Some(next) = next {
            let n = into_next.entry(next).or_default();
            *n = (*n).max(e.into_next);
        }
    }
    let visible = |m: &ModuleInfo| -> bool {
        let covered = ancestors(&m.path).any(|a| planned.contains_key(a));
        if covered {
            return false;
        }
        m.depth <= 1
            || planned.contains_key(m.path.as_str())
            || above_opened.contains(m.path.as_str())
            || parent(&m.path).is_some_and(|p| opened.contains(p))
    };
    let rows: Vec<(String, &str, String)> = modules
        .iter()
        .enumerate()
        .filter(|(_, m)| visible(m))
        .map(|(mi, m)| {
            let name = format!("{}{}", "  ".repeat(m.depth), path(&m.path));
            // The first entry whose run covers `m`, and `m`'s position in that run's chain.
            let run = ancestors(&m.path)
                .filter_map(|c| {
                    let i = ix.link_index(mi, c)?;
                    Some(((*first_run.get(c)?.get(i)?)?, i))
                })
                .min();
            let note = if let Some(p) = planned.get(m.path.as_str()) {
                p.to_string()
            } else if let Some((k, i)) = run {
                let (e, [a, b]) = (&entries[k], entries[k].children.unwrap_or_default());
                if i == a && e.into_next > 0 {
                    let next = next[k].map(|p| path(p).to_string()).unwrap_or_default();
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
            } else if ancestors(&m.path).any(|c| {
                into_next
                    .get(c)
                    .is_some_and(|&n| ix.link_index(mi, c).is_some_and(|i| i < n))
            }) {
                "  (same segment)".to_string()
            } else if above_opened.contains(m.path.as_str()) {
                String::new()
            } else {
                "store".to_string()
            };
            (name, m.type_name, note)
        })
        .collect();
    rows_text(rows)
}

/// The rows `(indented name, type, note)` as aligned text, one line per row.
fn rows_text(rows: Vec<(String, &str, String)>) -> String {
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

    /// Plans that address every part of `modules`: each module alone, runs over every
    /// container's chain (overlapping, out of order, past its end, into the next child), and
    /// all of these at once.
    fn plans_for(modules: &[ModuleInfo]) -> Vec<Plan> {
        let mut entries = Vec::new();
        for (k, m) in modules.iter().enumerate() {
            let policy = if k % 2 == 0 {
                Policy::CHECKPOINT
            } else {
                Policy::Store
            };
            entries.push(memopt_checkpoint::PlanEntry {
                path: m.path.clone(),
                children: None,
                into_next: 0,
                policy,
            });
            let len = m.links.len().max(m.children);
            for (a, b, into_next) in [(0, 2, 0), (1, len, 0), (0, 1, 1), (1, 2, 2), (2, len + 3, 0)] {
                entries.push(memopt_checkpoint::PlanEntry {
                    path: m.path.clone(),
                    children: Some([a, b.max(a + 1)]),
                    into_next,
                    policy: Policy::CHECKPOINT,
                });
            }
        }
        let mut plans: Vec<Plan> = entries
            .iter()
            .map(|e| {
                let mut plan = Plan::store_all();
                plan.entries.push(e.clone());
                plan
            })
            .collect();
        let runs: Vec<_> = entries.iter().filter(|e| e.children.is_some()).cloned().collect();
        for all in [entries, runs] {
            let mut plan = Plan::store_all();
            plan.entries.extend(all.iter().rev().cloned());
            plans.push(plan.clone());
            plan.entries.reverse();
            plans.push(plan);
        }
        plans
    }

    #[test]
    fn the_indexed_tree_matches_the_scanning_one_byte_for_byte() {
        let _t = MemoryTracker::install(MemoryTracker::new(Device::META));
        for entry in zoo::entries() {
            let modules = zoo::build(entry.name, &entry.small, Device::META, 0)
                .unwrap()
                .modules();
            for plan in plans_for(&modules) {
                assert_eq!(
                    plan_tree(&modules, &plan),
                    reference::plan_tree(&modules, &plan),
                    "{} with {:?}",
                    entry.name,
                    plan.entries
                );
            }
        }
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
