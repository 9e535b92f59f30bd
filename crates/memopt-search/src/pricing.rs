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
}

impl<'c> SegmentPricing<'c> {
    pub(crate) fn new(cost: &'c CostModel) -> Self {
        let mut empty = cost.clone();
        empty.modules.clear();
        SegmentPricing {
            cost,
            empty,
            by_path: cost
                .modules
                .iter()
                .enumerate()
                .map(|(i, m)| (m.path.as_str(), i))
                .collect(),
        }
    }

    /// The entries `site` covers, in the cost model's order: its module and everything below,
    /// or for a run, the container (its children's names outside the run blanked) and the
    /// run's children with everything below them.
    fn covered(&self, site: &Site) -> Vec<ModuleCostEntry> {
        let Some([start, end]) = site.run else {
            return self
                .cost
                .modules
                .iter()
                .filter(|m| ModulePath::str_is_under(&m.path, &site.path))
                .cloned()
                .collect();
        };
        let Some(&at) = self.by_path.get(site.path.as_str()) else {
            return Vec::new();
        };
        let container = &self.cost.modules[at];
        let parent = ModulePath::from(site.path.as_str());
        let children: Vec<ModulePath> = container
            .children
            .iter()
            .take(end)
            .skip(start)
            .map(|name| parent.child(name))
            .collect();
        self.cost
            .modules
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                if i == at {
                    // The run's children by index; the names before it are not read.
                    return Some(ModuleCostEntry {
                        path: m.path.clone(),
                        module_type: m.module_type.clone(),
                        leaf: m.leaf,
                        children: m
                            .children
                            .iter()
                            .take(end)
                            .enumerate()
                            .map(|(k, n)| if k < start { String::new() } else { n.clone() })
                            .collect(),
                        calls: m.calls,
                        flops: m.flops,
                        bytes: m.bytes,
                        inputs: m.inputs.clone(),
                    });
                }
                children
                    .iter()
                    .any(|c| ModulePath::str_is_under(&m.path, c))
                    .then(|| m.clone())
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
        version: PLAN_VERSION,
        entries: vec![PlanEntry {
            path: site.path.clone(),
            children: site.run,
            policy,
        }],
    };
    cost.plan_extra_ms(&plan)
}
