//! The memory and time model of a chain of segments, each run under one of a few options.
//!
//! A training step runs the segments' forward passes in order and their backward passes in
//! reverse. With every option's figures measured exactly (see [`crate::measure`]), the tracked
//! bytes at any moment are a sum of per-segment terms, so the step's peak is
//!
//! ```text
//! max( max_i  base + K(<i) + S(<i) + F_i(o_i),                    forward of segment i
//!      max_i  base + K(<i) + S(all) + P(>i) + W_i(o_i),           backward of segment i
//!             base + P(all) )                                     optimizer update
//! ```
//!
//! where `K` are the bytes a segment keeps from its forward to its backward (saved activations,
//! a compressed input, chunk-boundary states), `S` what a segment holds until the step ends,
//! `P` its parameter gradients, `F` and `W` its own forward and backward peaks. Only `K`, `F`,
//! `W` and the extra time depend on the option. Plans are made for the step `memopt train`
//! runs ([`memopt_profiler::PLANNED_STEP`]), which keeps no final neuron state (each is
//! released as soon as nothing reads it), so `S` is 0 for the model's segments; the loss holds
//! its value.
//!
//! When the step updates in backward ([`memopt_checkpoint::Plan::update_in_backward`], the
//! planners' default) each segment's parameter gradients are freed inside its own backward as
//! soon as they are final, so they are part of its `W` and `P` is 0 for every segment: no
//! backward holds the gradients of the segments after it, and the update holds none.

use crate::{Result, SearchError};
use memopt_checkpoint::{PlanEntry, Policy};
use memopt_core::ModulePath;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One way to run a segment, with its exact memory figures (bytes) and extra time (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentOption {
    /// The policy this option assigns.
    pub policy: Policy,
    /// Peak bytes above what earlier segments hold, during its forward pass.
    pub forward_peak: u64,
    /// Bytes held from its forward to its backward pass.
    pub kept: u64,
    /// Peak bytes above what earlier segments keep (states, later gradients excluded), during
    /// its backward pass (recomputation included).
    pub backward_peak: u64,
    /// Time this option adds to the step compared with storing, in ms.
    pub extra_ms: f64,
}

/// A segment of the chain: its options and the bytes it holds whatever the option.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainSegment {
    /// Module path (the container's, for a run of children).
    pub path: String,
    /// For a run of consecutive children of the module at `path`: `[start, end)`.
    pub children: Option<[usize; 2]>,
    /// For a run: links of the next child it also covers
    /// ([`memopt_checkpoint::PlanEntry::into_next`]; 0: none).
    #[serde(default)]
    pub into_next: usize,
    /// For a run whose parts in its splittable node are not the container's children one for
    /// one (see `builder.rs`, `pieces`): the parts `[start, end)` it covers there. `None`: its
    /// `children`.
    #[serde(default)]
    pub span: Option<[usize; 2]>,
    /// The ways to run it; index 0 stores everything (runs of children, which are only ever
    /// checkpointed, have no store option).
    pub options: Vec<SegmentOption>,
    /// Bytes it holds until the end of the step: neuron states a step that keeps them would
    /// hold (none under the planned step options, [`memopt_profiler::PLANNED_STEP`]); the
    /// loss's value for the loss.
    pub states: u64,
    /// Bytes of its parameter gradients.
    pub param_grads: u64,
}

/// A node of the chain: a segment, or a segment that can also run as the chain of its
/// children (a spatial split: each child then gets its own option).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChainNode {
    /// A segment run whole under one of its options.
    Segment(ChainSegment),
    /// A segment that runs either whole or as its children, in order, where runs of
    /// consecutive children may share one checkpoint.
    Splittable {
        /// The segment run whole.
        whole: ChainSegment,
        /// Its children, which form a chain.
        parts: Vec<ChainNode>,
        /// Runs of consecutive children that can be checkpointed as one segment.
        runs: Vec<ChainSegment>,
    },
}

/// Start and end of a run segment among the parts of its splittable node.
pub(crate) fn run_bounds(seg: &ChainSegment) -> [usize; 2] {
    seg.span.or(seg.children).unwrap_or([0, 0])
}

impl ChainNode {
    /// The segment run whole.
    pub fn segment(&self) -> &ChainSegment {
        match self {
            ChainNode::Segment(s) | ChainNode::Splittable { whole: s, .. } => s,
        }
    }
}

/// One segment of a plan with the option it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chosen<'a> {
    /// The segment.
    pub segment: &'a ChainSegment,
    /// Index into its options.
    pub option: usize,
}

impl Chosen<'_> {
    /// The option.
    pub fn option(&self) -> &SegmentOption {
        &self.segment.options[self.option]
    }
}

/// The chain: persistent bytes and nodes in forward order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainModel {
    /// Bytes held throughout the step: parameters, buffers, optimizer state, batch.
    pub base: u64,
    /// Nodes in forward order.
    pub nodes: Vec<ChainNode>,
}

impl ChainModel {
    /// Bytes of all neuron states.
    pub fn states_total(&self) -> Result<u64> {
        self.nodes.iter().map(ChainNode::segment).try_fold(0, |sum, s| {
            add(&s.path, "the neuron states of the whole model", sum, s.states)
        })
    }

    /// Bytes of all parameter gradients.
    pub fn param_grads_total(&self) -> Result<u64> {
        self.nodes.iter().map(ChainNode::segment).try_fold(0, |sum, s| {
            add(
                &s.path,
                "the parameter gradients of the whole model",
                sum,
                s.param_grads,
            )
        })
    }

    /// Predicted peak bytes of a plan given as its segments in forward order.
    pub fn peak(&self, plan: &[Chosen<'_>]) -> Result<u64> {
        let mut walk = Walk::start(self)?;
        for c in plan {
            walk.step(c.segment, c.option())?;
        }
        Ok(walk.finish())
    }

    /// Extra time of a plan over storing everything, in ms.
    pub fn extra_ms(plan: &[Chosen<'_>]) -> f64 {
        plan.iter().map(|c| c.option().extra_ms).sum()
    }

    /// Every plan the chain allows (whole or split at each splittable node, every option of
    /// every segment). Exponential: for tests and tiny chains.
    pub fn all_plans(&self) -> Vec<Vec<Chosen<'_>>> {
        fn expand<'a>(nodes: &'a [ChainNode]) -> Vec<Vec<Chosen<'a>>> {
            let Some((first, rest)) = nodes.split_first() else {
                return vec![Vec::new()];
            };
            let heads: Vec<Vec<Chosen<'a>>> = match first {
                ChainNode::Segment(s) => (0..s.options.len())
                    .map(|o| {
                        vec![Chosen {
                            segment: s,
                            option: o,
                        }]
                    })
                    .collect(),
                ChainNode::Splittable { whole, parts, runs } => {
                    let mut v: Vec<Vec<Chosen<'a>>> = (0..whole.options.len())
                        .map(|o| {
                            vec![Chosen {
                                segment: whole,
                                option: o,
                            }]
                        })
                        .collect();
                    v.extend(expand_parts(parts, runs, 0));
                    v
                }
            };
            let tails = expand(rest);
            heads
                .iter()
                .flat_map(|h| tails.iter().map(move |t| [h.clone(), t.clone()].concat()))
                .collect()
        }
        /// Plans of `parts[from..]`: each child alone, or a run starting at it.
        fn expand_parts<'a>(
            parts: &'a [ChainNode],
            runs: &'a [ChainSegment],
            from: usize,
        ) -> Vec<Vec<Chosen<'a>>> {
            if from >= parts.len() {
                return vec![Vec::new()];
            }
            let mut out = Vec::new();
            for head in expand(&parts[from..from + 1]) {
                for tail in expand_parts(parts, runs, from + 1) {
                    out.push([head.clone(), tail].concat());
                }
            }
            for run in runs.iter().filter(|r| run_bounds(r)[0] == from) {
                for option in 0..run.options.len() {
                    for tail in expand_parts(parts, runs, run_bounds(run)[1]) {
                        out.push([vec![Chosen { segment: run, option }], tail].concat());
                    }
                }
            }
            out
        }
        expand(&self.nodes)
    }
}

impl ChainModel {
    /// One plan picked by `pick(n)`, which returns a choice in `0..n`: at each splittable node,
    /// whole (one of its options) or split; at each segment, one of its options.
    pub fn pick_plan(&self, pick: &mut dyn FnMut(usize) -> usize) -> Vec<Chosen<'_>> {
        fn go<'a>(nodes: &'a [ChainNode], pick: &mut dyn FnMut(usize) -> usize, out: &mut Vec<Chosen<'a>>) {
            for node in nodes {
                match node {
                    ChainNode::Segment(s) => out.push(Chosen {
                        segment: s,
                        option: pick(s.options.len()),
                    }),
                    ChainNode::Splittable { whole, parts, runs } => {
                        let o = pick(whole.options.len() + 1);
                        if o < whole.options.len() {
                            out.push(Chosen {
                                segment: whole,
                                option: o,
                            });
                            continue;
                        }
                        let mut i = 0;
                        while i < parts.len() {
                            let starting: Vec<&ChainSegment> =
                                runs.iter().filter(|r| run_bounds(r)[0] == i).collect();
                            match pick(starting.len() + 1) {
                                0 => {
                                    go(&parts[i..i + 1], pick, out);
                                    i += 1;
                                }
                                k => {
                                    let run = starting[k - 1];
                                    let option = pick(run.options.len());
                                    out.push(Chosen { segment: run, option });
                                    i = run_bounds(run)[1];
                                }
                            }
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        go(&self.nodes, pick, &mut out);
        out
    }
}

/// The plan of a chain solution: its entries ([`plan_entries`]), updating after backward (the
/// session decides whether to update in backward).
pub(crate) fn plan_of(plan: &[Chosen<'_>]) -> memopt_checkpoint::Plan {
    memopt_checkpoint::Plan {
        update_in_backward: false,
        version: memopt_checkpoint::PLAN_VERSION,
        entries: plan_entries(plan),
    }
}

/// The plan entries of a plan (store options omitted).
pub fn plan_entries(plan: &[Chosen<'_>]) -> Vec<PlanEntry> {
    plan.iter()
        .filter(|c| c.option().policy != Policy::Store)
        .map(|c| PlanEntry {
            path: c.segment.path.clone(),
            children: c.segment.children,
            into_next: c.segment.into_next,
            policy: c.option().policy,
        })
        .collect()
}

/// `left + right`, or the error naming `segment` and the sum.
pub(crate) fn add(segment: &str, what: &'static str, left: u64, right: u64) -> Result<u64> {
    left.checked_add(right).ok_or_else(|| SearchError::ByteOverflow {
        segment: display_path(segment).to_string(),
        what,
        left,
        right,
    })
}

/// A segment path as shown to users: `(root)` for the whole model.
fn display_path(path: &str) -> &str {
    if path.is_empty() { "(root)" } else { path }
}

/// The running figures of a prefix of the chain: what the next segment's terms need. Every
/// sum is checked: a byte count beyond `u64::MAX` is an error naming the segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Walk {
    base: u64,
    states_total: u64,
    grads_total: u64,
    /// Bytes held during the optimizer update: base and every parameter gradient.
    update: u64,
    /// Bytes kept by the segments so far.
    pub kept: u64,
    /// Bytes of states held by the segments so far.
    states_done: u64,
    /// Parameter gradients of the segments so far.
    grads_done: u64,
    /// The largest term so far.
    pub max: u64,
}

impl Walk {
    pub(crate) fn start(chain: &ChainModel) -> Result<Walk> {
        let grads_total = chain.param_grads_total()?;
        Ok(Walk {
            base: chain.base,
            states_total: chain.states_total()?,
            grads_total,
            update: add(
                "",
                "the bytes held during the optimizer update",
                chain.base,
                grads_total,
            )?,
            kept: 0,
            states_done: 0,
            grads_done: 0,
            max: chain.base,
        })
    }

    /// Adds one segment run with `option`.
    pub(crate) fn step(&mut self, seg: &ChainSegment, option: &SegmentOption) -> Result<()> {
        let path = seg.path.as_str();
        let held = add(
            path,
            "the bytes held before its forward pass",
            self.base,
            self.kept,
        )?;
        let before = add(
            path,
            "the bytes held before its forward pass",
            held,
            self.states_done,
        )?;
        let forward = add(path, "its forward peak", before, option.forward_peak)?;
        self.grads_done = add(
            path,
            "the parameter gradients so far",
            self.grads_done,
            seg.param_grads,
        )?;
        // Each segment's gradients are part of the total, so this cannot underflow unless the
        // chain's segments disagree with their own totals.
        let later_grads = self.grads_total.checked_sub(self.grads_done).ok_or_else(|| {
            SearchError::Internal(format!(
                "segment '{}': parameter gradients so far ({} bytes) exceed the chain's total ({} bytes)",
                display_path(path),
                self.grads_done,
                self.grads_total
            ))
        })?;
        let with_states = add(
            path,
            "the bytes held during its backward pass",
            held,
            self.states_total,
        )?;
        let with_grads = add(
            path,
            "the bytes held during its backward pass",
            with_states,
            later_grads,
        )?;
        let backward = add(path, "its backward peak", with_grads, option.backward_peak)?;
        self.max = self.max.max(forward).max(backward);
        self.kept = add(
            path,
            "the bytes kept for the backward pass",
            self.kept,
            option.kept,
        )?;
        self.states_done = add(path, "the neuron states so far", self.states_done, seg.states)?;
        Ok(())
    }

    /// The totals that depend on the path taken so far (states and gradients of the segments
    /// before), in bytes: two walks with equal keys have equal futures but for `kept` and `max`.
    pub(crate) fn path_key(&self) -> (u64, u64) {
        (self.states_done, self.grads_done)
    }

    /// The peak, including the optimizer update after the backward pass.
    pub(crate) fn finish(&self) -> u64 {
        self.max.max(self.update)
    }
}

impl ChainModel {
    /// The chain's choices that make up `plan`, or `None` when the plan uses a policy the chain
    /// did not measure, or assigns policies the chain cannot express (then ask the exact
    /// estimator instead). Modules without an entry are stored; a splittable node with no
    /// entry of its own is split when an entry targets something inside it. Linear in the
    /// chain's nodes and runs and the plan's entries (strategies call it once per candidate).
    pub fn select(&self, plan: &memopt_checkpoint::Plan) -> Option<Vec<Chosen<'_>>> {
        /// The wanted policies by (path, run of children, links of the next child), borrowed
        /// from the plan.
        type Wanted<'p> = HashMap<(&'p str, Option<[usize; 2]>, usize), Policy>;
        let mut wanted: Wanted<'_> = HashMap::with_capacity(plan.entries.len());
        for e in &plan.entries {
            // A repeated target: the last entry wins, as in a policy table.
            wanted.insert((e.path.as_str(), e.children, e.into_next), e.policy);
        }
        let mut used = 0usize;
        fn option_of(seg: &ChainSegment, policy: Policy) -> Option<usize> {
            seg.options.iter().position(|o| o.policy == policy)
        }
        fn key(seg: &ChainSegment) -> (&str, Option<[usize; 2]>, usize) {
            (seg.path.as_str(), seg.children, seg.into_next)
        }
        /// The index of the first run of children `bounds` (by bisection: the builder lists
        /// runs in order of their bounds; otherwise one by one).
        fn find_run(runs: &[ChainSegment], sorted: bool, bounds: [usize; 2]) -> Option<usize> {
            if sorted {
                let k = runs.partition_point(|r| run_bounds(r) < bounds);
                (k < runs.len() && run_bounds(&runs[k]) == bounds).then_some(k)
            } else {
                runs.iter().position(|r| run_bounds(r) == bounds)
            }
        }
        fn inside(wanted: &Wanted<'_>, seg: &ChainSegment) -> bool {
            wanted
                .keys()
                .any(|(p, c, _)| (*p == seg.path && c.is_some()) || ModulePath::str_is_below(p, &seg.path))
        }
        fn go<'a>(
            nodes: &'a [ChainNode],
            wanted: &Wanted<'_>,
            used: &mut usize,
            out: &mut Vec<Chosen<'a>>,
        ) -> Option<()> {
            for node in nodes {
                match node {
                    ChainNode::Segment(s) => {
                        let policy = wanted.get(&key(s)).copied();
                        *used += usize::from(policy.is_some());
                        out.push(Chosen {
                            segment: s,
                            option: option_of(s, policy.unwrap_or(Policy::Store))?,
                        });
                    }
                    ChainNode::Splittable { whole, parts, runs } => {
                        if let Some(&policy) = wanted.get(&key(whole)) {
                            *used += 1;
                            out.push(Chosen {
                                segment: whole,
                                option: option_of(whole, policy)?,
                            });
                        } else if inside(wanted, whole) {
                            // The wanted runs by their first part (the first in chain order
                            // when two start at the same part).
                            let mut run_at: HashMap<usize, (usize, Policy)> = HashMap::new();
                            if runs.iter().all(|r| r.span.is_none()) {
                                let sorted = runs.is_sorted_by_key(run_bounds);
                                for (&(path, children, into_next), &policy) in wanted {
                                    let Some(bounds) = children
                                        .filter(|[a, b]| a < b && path == whole.path && into_next == 0)
                                    else {
                                        continue;
                                    };
                                    if let Some(k) = find_run(runs, sorted, bounds) {
                                        let at = run_at.entry(bounds[0]).or_insert((k, policy));
                                        if k < at.0 {
                                            *at = (k, policy);
                                        }
                                    }
                                }
                            } else {
                                // Runs named otherwise than by their parts (see `span`).
                                for (k, r) in runs.iter().enumerate() {
                                    if let Some(&policy) = wanted.get(&key(r)) {
                                        run_at.entry(run_bounds(r)[0]).or_insert((k, policy));
                                    }
                                }
                            }
                            let mut i = 0;
                            while i < parts.len() {
                                match run_at.get(&i) {
                                    Some(&(k, policy)) => {
                                        let r = &runs[k];
                                        *used += 1;
                                        out.push(Chosen {
                                            segment: r,
                                            option: option_of(r, policy)?,
                                        });
                                        i = run_bounds(r)[1];
                                    }
                                    None => {
                                        go(&parts[i..i + 1], wanted, used, out)?;
                                        i += 1;
                                    }
                                }
                            }
                        } else {
                            out.push(Chosen {
                                segment: whole,
                                option: option_of(whole, Policy::Store)?,
                            });
                        }
                    }
                }
            }
            Some(())
        }
        let mut out = Vec::new();
        go(&self.nodes, &wanted, &mut used, &mut out)?;
        (used == wanted.len()).then_some(out)
    }
}
