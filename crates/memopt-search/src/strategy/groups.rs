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
                    into_next: 0,
                    policy,
                });
            } else if j - i >= 2 {
                out.push(PlanEntry {
                    path: container.path.clone(),
                    children: Some([layers[i].index, layers[j - 1].index + 1]),
                    into_next: 0,
                    policy,
                });
            } else {
                out.push(PlanEntry {
                    path: layers[i].site.path.clone(),
                    children: None,
                    into_next: 0,
                    policy,
                });
            }
            i = j;
        }
    }
    out
}

/// One block of a model: a run of consecutive layers ([`crate::sites::Site::layers`]) ending
/// with one that holds a spiking neuron — `[pool] conv-bn-LIF` in a flat model, or a whole
/// residual block. Layers after the last neuron (pooling, the classifier head) belong to no
/// block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Its position among the model's blocks, from 0.
    pub index: usize,
    /// Its layers, as positions in [`crate::sites::Site::layers`].
    pub layers: std::ops::Range<usize>,
    /// The module path of each of its layers.
    pub paths: Vec<String>,
    /// Bytes of its input (what a checkpoint keeps before compression). What its layers save
    /// for backward when stored is [`Block::saved_bytes`].
    pub input_bytes: u64,
}

impl Block {
    /// Bytes its layers save for backward in the forward pass of the step `report` measured
    /// (a [`crate::MemoryReport`] from [`crate::profile_memory`]; under the plan storing
    /// everything, what checkpointing the block would free). A layer the report lacks counts
    /// zero.
    ///
    /// ```
    /// use memopt_search::{Blocks, Device, Plan, PlanningSession, Workload, profile_memory};
    /// let workload = Workload::zoo_small("cifar10dvs-vgg", 2).unwrap();
    /// let session = PlanningSession::new(&workload).unwrap();
    /// let report = profile_memory(&workload, &Plan::default(), Device::META).unwrap();
    /// let blocks = Blocks::of(session.sites());
    /// // The block that keeps the most for backward.
    /// let largest = blocks.iter().max_by_key(|b| b.saved_bytes(&report)).unwrap();
    /// assert!(largest.saved_bytes(&report) > 0);
    /// ```
    pub fn saved_bytes(&self, report: &crate::MemoryReport) -> u64 {
        self.paths
            .iter()
            .filter_map(|p| report.module(p, crate::Phase::Forward))
            .map(|m| m.saved_bytes)
            .sum()
    }
}

/// The blocks of a model, and plans made of whole blocks. A plan built here cannot cut a
/// block in two or give one policy to layers of two blocks: each chosen block becomes the plan
/// entries that recompute exactly its layers (one run of children when its layers share a
/// container, otherwise one entry per container).
///
/// ```
/// use memopt_search::{Blocks, PlanningSession, Policy, Workload};
/// let workload = Workload::zoo_small("cifar10dvs-vgg", 2).unwrap();
/// let session = PlanningSession::new(&workload).unwrap();
/// let blocks = Blocks::of(session.sites());
/// // Checkpoint every other block, starting with the first.
/// let plan = blocks.plan(|b| (b.index % 2 == 0).then_some(Policy::CHECKPOINT));
/// assert!(!plan.entries.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct Blocks<'a> {
    layers: Vec<Layer<'a>>,
    blocks: Vec<Block>,
}

impl<'a> Blocks<'a> {
    /// The blocks under `root` (a session's [`crate::PlanningSession::sites`]).
    pub fn of(root: &'a crate::sites::Site) -> Self {
        let layers = root.layers();
        let mut blocks = Vec::new();
        let mut start = 0;
        for (i, l) in layers.iter().enumerate() {
            if l.site.stateful {
                blocks.push(Block {
                    index: blocks.len(),
                    layers: start..i + 1,
                    paths: layers[start..=i].iter().map(|l| l.site.path.clone()).collect(),
                    input_bytes: layers[start].site.input_bytes(),
                });
                start = i + 1;
            }
        }
        Blocks { layers, blocks }
    }

    /// The blocks, in model order.
    pub fn iter(&self) -> std::slice::Iter<'_, Block> {
        self.blocks.iter()
    }

    /// How many blocks the model has.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether the model has no block (no spiking neuron).
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The plan entries that give `block` the policy `policy`.
    pub fn entries(&self, block: &Block, policy: Policy) -> Vec<PlanEntry> {
        group_entries(&self.layers, std::slice::from_ref(&block.layers), policy)
    }

    /// The plan that gives each block the policy `choose` returns for it (`None`: stored).
    pub fn plan(&self, mut choose: impl FnMut(&Block) -> Option<Policy>) -> memopt_checkpoint::Plan {
        let mut entries = Vec::new();
        for b in &self.blocks {
            if let Some(policy) = choose(b) {
                entries.extend(self.entries(b, policy));
            }
        }
        memopt_checkpoint::Plan {
            update_in_backward: false,
            version: memopt_checkpoint::PLAN_VERSION,
            entries,
        }
    }
}

/// The plan that checkpoints every block ([`Blocks`]) with `policy`; layers after the last
/// neuron stay stored.
pub fn block_plan(root: &crate::sites::Site, policy: Policy) -> memopt_checkpoint::Plan {
    Blocks::of(root).plan(|_| Some(policy))
}
