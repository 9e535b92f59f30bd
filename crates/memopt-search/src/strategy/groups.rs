//! Turning a grouping of consecutive layers into plan entries.

use crate::sites::Layer;
use memopt_checkpoint::{PlanEntry, Policy};

/// Plan entries that recompute each group of consecutive layers as one segment with `policy`:
/// a group within one container that allows runs becomes a run of children; otherwise its
/// layers are split at container boundaries and each piece becomes a run or a single module.
pub(crate) fn group_entries(
    layers: &[Layer<'_>],
    groups: &[std::ops::Range<usize>],
    policy: Policy,
) -> Vec<PlanEntry> {
    let mut out = Vec::new();
    for g in groups {
        let mut i = g.start;
        while i < g.end {
            let container = layers[i].container;
            let mut j = i + 1;
            while j < g.end && std::ptr::eq(layers[j].container, container) && container.runs_allowed {
                j += 1;
            }
            let whole_container = layers[i].index == 0 && layers[j - 1].index + 1 == container.parts.len();
            if j - i >= 2 && whole_container && !container.path.is_empty() {
                out.push(PlanEntry {
                    path: container.path.clone(),
                    children: None,
                    policy,
                });
            } else if j - i >= 2 {
                out.push(PlanEntry {
                    path: container.path.clone(),
                    children: Some([layers[i].index, layers[j - 1].index + 1]),
                    policy,
                });
            } else {
                out.push(PlanEntry {
                    path: layers[i].site.path.clone(),
                    children: None,
                    policy,
                });
            }
            i = j;
        }
    }
    out
}

/// The plan that checkpoints every block with `policy`: runs of layers ending with one that
/// holds a neuron ([`crate::sites::Site::layers`]); layers after the last neuron stay stored.
pub fn block_plan(root: &crate::sites::Site, policy: Policy) -> memopt_checkpoint::Plan {
    let layers = root.layers();
    let mut blocks = Vec::new();
    let mut start = 0;
    for (i, l) in layers.iter().enumerate() {
        if l.site.stateful {
            blocks.push(start..i + 1);
            start = i + 1;
        }
    }
    memopt_checkpoint::Plan {
        version: memopt_checkpoint::policy::PLAN_VERSION,
        entries: group_entries(&layers, &blocks, policy),
    }
}
