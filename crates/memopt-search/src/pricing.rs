//! The cost model's extra time of one segment under one policy, priced on the modules the
//! segment covers. [`CostModel::plan_extra_ms`] walks every module of the model for every
//! entry, which makes pricing every segment of a chain quadratic in its length; a one-entry
//! plan's extra time comes from the modules that entry covers (each recomputed module's
//! forward time, the saved input of its first), so the same call on a cost model holding only
//! those gives the same number. `tests::pricing_on_the_covered_modules_is_the_full_models`
//! checks it to the bit on every segment of several models.

use crate::sites::Site;
use memopt_checkpoint::policy::PLAN_VERSION;
use memopt_checkpoint::{Plan, PlanEntry, Policy};
use memopt_core::ModulePath;
use memopt_profiler::CostModel;
use memopt_profiler::cost::ModuleCostEntry;
use std::collections::HashMap;

/// Prices segments of one model.
pub(crate) struct SegmentPricing<'c> {
    cost: &'c CostModel,
    /// The cost model without modules, filled per segment.
    empty: CostModel,
    /// Index of each module's entry by path.
    by_path: HashMap<&'c str, usize>,
    /// For each module with children: the entries under each link of its chain (the link
    /// included), in the cost model's order.
    under_child: HashMap<&'c str, Vec<Vec<usize>>>,
}

impl<'c> SegmentPricing<'c> {
    pub(crate) fn new(cost: &'c CostModel) -> Self {
        let mut empty = cost.clone();
        empty.modules.clear();
        let by_path: HashMap<&'c str, usize> = cost
            .modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path.as_str(), i))
            .collect();
        // Each container's links by path (its children, or the links of its chain when it
        // inlines children: then a link is two levels below it), then every entry filed
        // under the link of each ancestor it lies under.
        let mut link_index: HashMap<&'c str, HashMap<String, usize>> = HashMap::new();
        let mut under_child: HashMap<&'c str, Vec<Vec<usize>>> = HashMap::new();
        for m in cost.modules.iter().filter(|m| !m.children.is_empty()) {
            let parent = ModulePath::from(m.path.as_str());
            link_index.insert(
                m.path.as_str(),
                m.chain()
                    .iter()
                    .enumerate()
                    .map(|(k, name)| (parent.child(name).as_str().to_string(), k))
                    .collect(),
            );
            under_child.insert(m.path.as_str(), vec![Vec::new(); m.chain().len()]);
        }
        for (i, m) in cost.modules.iter().enumerate() {
            let mut child = ModulePath::from(m.path.as_str());
            let mut grandchild: Option<ModulePath> = None;
            while let Some(parent) = child.parent() {
                if let Some((&container, index)) = link_index.get_key_value(parent.as_str()) {
                    let k = index
                        .get(child.as_str())
                        .or_else(|| grandchild.as_ref().and_then(|g| index.get(g.as_str())));
                    if let (Some(&k), Some(groups)) = (k, under_child.get_mut(container)) {
                        groups[k].push(i);
                    }
                }
                grandchild = Some(child);
                child = parent;
            }
        }
        SegmentPricing {
            cost,
            empty,
            by_path,
            under_child,
        }
    }

    /// The indices of the entries under links `range` of the module at `path`.
    fn under(&self, path: &str, range: std::ops::Range<usize>) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .under_child
            .get(path)
            .map(|groups| {
                groups
                    .iter()
                    .take(range.end)
                    .skip(range.start)
                    .flatten()
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    /// The entries `site` covers, in the cost model's order: its module and everything below,
    /// or for a run, the container (the names of its links before the run blanked) and the
    /// run's links with everything below them, and when it goes on into the next child, that
    /// child's entry and its first links with everything below them.
    fn covered(&self, site: &Site) -> Vec<ModuleCostEntry> {
        let Some(&at) = self.by_path.get(site.path.as_str()) else {
            return Vec::new();
        };
        let Some([start, end]) = site.run else {
            let mut all = self.under(&site.path, 0..usize::MAX);
            all.push(at);
            all.sort_unstable();
            return all.into_iter().map(|i| self.cost.modules[i].clone()).collect();
        };
        let mut all = self.under(&site.path, start..end);
        all.push(at);
        // A run going on into the next child's first links covers those too, and pricing
        // reads the next child's chain from its entry.
        if site.into_next > 0
            && let Some(name) = self.cost.modules[at].chain().get(end)
        {
            let next = ModulePath::from(site.path.as_str()).child(name);
            if let Some(&i) = self.by_path.get(next.as_str()) {
                all.push(i);
                all.extend(self.under(next.as_str(), 0..site.into_next));
            }
        }
        all.sort_unstable();
        all.dedup();
        all.into_iter()
            .map(|i| {
                let m = &self.cost.modules[i];
                if i != at {
                    return m.clone();
                }
                // The run's links by index (and the next child's name, for a run that goes on
                // into it); the names before it are not read.
                let kept = end + usize::from(site.into_next > 0);
                let blank = |names: &[String]| -> Vec<String> {
                    names
                        .iter()
                        .take(kept)
                        .enumerate()
                        .map(|(k, n)| if k < start { String::new() } else { n.clone() })
                        .collect()
                };
                // Built field by field: cloning the container's names first would copy a long
                // chain's every name for each run of it.
                let (children, links) = if m.links.is_empty() {
                    (blank(&m.children), Vec::new())
                } else {
                    (m.children.clone(), blank(&m.links))
                };
                ModuleCostEntry {
                    path: m.path.clone(),
                    module_type: m.module_type.clone(),
                    leaf: m.leaf,
                    children,
                    links,
                    calls: m.calls,
                    flops: m.flops,
                    bytes: m.bytes,
                    inputs: m.inputs.clone(),
                    ends_parent: m.ends_parent,
                    state_bytes: m.state_bytes,
                }
            })
            .collect()
    }

    /// The cost model holding only the modules `site` covers.
    pub(crate) fn for_site(&self, site: &Site) -> CostModel {
        let mut model = self.empty.clone();
        model.modules = self.covered(site);
        model
    }
}

/// Predicted time `policy` adds to `site` on `cost` (recomputation and compression traffic),
/// in ms.
pub(crate) fn extra_ms(cost: &CostModel, site: &Site, policy: Policy) -> f64 {
    let plan = Plan {
        update_in_backward: false,
        version: PLAN_VERSION,
        entries: vec![PlanEntry {
            path: site.path.clone(),
            children: site.run,
            into_next: site.into_next,
            policy,
        }],
    };
    cost.plan_extra_ms(&plan)
}
