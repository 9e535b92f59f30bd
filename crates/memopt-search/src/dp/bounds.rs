//! What the search knows about every position of the chain before it starts: the totals that
//! make a segment's own terms ([`Position`]), and what every prefix reaching the position has
//! at least ([`Reach`], from one forward pass), which bounds and lifts the suffixes there.

use super::ticks::Ticks;
use crate::chain::{ChainModel, ChainNode, ChainSegment, Chosen, add, run_bounds};
use crate::{Result, SearchError};

/// Position-dependent totals, in bytes: neuron states and parameter gradients of the whole
/// chain and of the segments before the position.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Position {
    states_total: u64,
    grads_total: u64,
    states_done: u64,
    grads_done: u64,
}

impl Position {
    /// The start of `chain`.
    pub(super) fn start(chain: &ChainModel) -> Result<Position> {
        Ok(Position {
            states_total: chain.states_total()?,
            grads_total: chain.param_grads_total()?,
            states_done: 0,
            grads_done: 0,
        })
    }

    /// The position after `seg`.
    pub(super) fn after(self, seg: &ChainSegment) -> Result<Position> {
        Ok(Position {
            states_done: add(
                &seg.path,
                "the neuron states so far",
                self.states_done,
                seg.states,
            )?,
            grads_done: add(
                &seg.path,
                "the parameter gradients so far",
                self.grads_done,
                seg.param_grads,
            )?,
            ..self
        })
    }

    /// `seg`'s own largest term under `option` above `base +` (bytes the segments before it
    /// keep): its forward peak over the states before it, or its backward peak over every
    /// state and the gradients of the segments before it (see [`crate::chain`]).
    pub(super) fn own(&self, seg: &ChainSegment, option: usize) -> Result<u64> {
        let o = &seg.options[option];
        let path = seg.path.as_str();
        let forward = add(path, "its forward peak", self.states_done, o.forward_peak)?;
        let later = self
            .grads_total
            .checked_sub(self.grads_done)
            .and_then(|g| g.checked_sub(seg.param_grads))
            .ok_or_else(|| {
                SearchError::Internal(format!(
                    "segment '{path}': parameter gradients so far exceed the chain's total ({} bytes)",
                    self.grads_total
                ))
            })?;
        let held = add(
            path,
            "the bytes held during its backward pass",
            self.states_total,
            later,
        )?;
        let backward = add(path, "its backward peak", held, o.backward_peak)?;
        Ok(forward.max(backward))
    }
}

/// Whether every way through every splittable node leaves the same states and gradients behind
/// (its children, and each run, hold exactly what the segments they replace hold), so that
/// every position has one [`Position`] whatever the plan before it. Measured chains do.
pub(super) fn consistent(chain: &ChainModel) -> Result<bool> {
    fn go(nodes: &[ChainNode], mut pos: Position) -> Result<Option<Position>> {
        for node in nodes {
            let end = pos.after(node.segment())?;
            if let ChainNode::Splittable { parts, runs, .. } = node {
                let mut at = Vec::with_capacity(parts.len() + 1);
                at.push(pos);
                for (i, part) in parts.iter().enumerate() {
                    match go(std::slice::from_ref(part), at[i])? {
                        Some(p) => at.push(p),
                        None => return Ok(None),
                    }
                }
                if at[parts.len()] != end {
                    return Ok(None);
                }
                for run in runs {
                    let [a, b] = run_bounds(run);
                    if a < b && b <= parts.len() && at[a].after(run)? != at[b] {
                        return Ok(None);
                    }
                }
            }
            pos = end;
        }
        Ok(Some(pos))
    }
    Ok(go(&chain.nodes, Position::start(chain)?)?.is_some())
}

/// What every prefix of a plan that reaches a position has at least: kept bytes, time, and
/// its largest term so far minus its kept bytes (`M - K`, which can be negative when a segment
/// keeps more than its own terms). Lower bounds, not figures of one prefix: each is the least
/// over every prefix, separately.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reach {
    /// Least bytes kept.
    pub kept: u64,
    /// Least `M - K`, in bytes.
    pub headroom: i128,
    /// Least time.
    pub ticks: Ticks,
}

impl Reach {
    /// At the start of a chain whose persistent bytes are `base`: nothing kept, `M = base`.
    fn start(base: u64) -> Reach {
        Reach {
            kept: 0,
            headroom: i128::from(base),
            ticks: 0,
        }
    }

    /// After a segment run under any of its options (`steps`). `M' - K' = max(M - K, base +
    /// own) - kept` is non-decreasing in `M - K`, so the least over prefixes is reached from
    /// the least.
    fn step(self, steps: &[Step<'_>], base: u64) -> Reach {
        let mut next = Reach {
            kept: u64::MAX,
            headroom: i128::MAX,
            ticks: Ticks::MAX,
        };
        for s in steps {
            let own = i128::from(base) + i128::from(s.own);
            next.kept = next.kept.min(self.kept.saturating_add(s.kept));
            next.headroom = next.headroom.min(self.headroom.max(own) - i128::from(s.kept));
            next.ticks = next.ticks.min(self.ticks.saturating_add(s.ticks));
        }
        next
    }

    /// The least of two, bound by bound: a position reached two ways.
    fn min(self, other: Reach) -> Reach {
        Reach {
            kept: self.kept.min(other.kept),
            headroom: self.headroom.min(other.headroom),
            ticks: self.ticks.min(other.ticks),
        }
    }
}

/// A segment under one option, placed at its position: what it adds to a suffix.
#[derive(Clone, Copy)]
pub(super) struct Step<'a> {
    /// The choice.
    pub chosen: Chosen<'a>,
    /// Its own largest term ([`Position::own`]), in bytes.
    pub own: u64,
    /// What it keeps for the backward pass, in bytes.
    pub kept: u64,
    /// Its extra time.
    pub ticks: Ticks,
}

/// One node of a consistent chain, ready to be searched: the [`Reach`] of each of its
/// positions (its start, and for a splittable node the start of each child) and each option
/// of it, its children and its runs as a [`Step`].
pub(super) struct NodeReach<'a> {
    /// At the node's start.
    pub start: Reach,
    /// The node run whole, under each option.
    pub whole: Vec<Step<'a>>,
    /// At the start of each child of a splittable node.
    pub inner: Vec<Reach>,
    /// The children's own.
    pub parts: Vec<NodeReach<'a>>,
    /// The runs starting at each child: where each ends, and its options.
    pub runs_from: Vec<Vec<(usize, Vec<Step<'a>>)>>,
}

/// The extra times of every option of a segment, in ticks.
pub(super) fn option_ticks(seg: &ChainSegment) -> Result<Vec<Ticks>> {
    seg.options
        .iter()
        .enumerate()
        .map(|(o, option)| super::ticks::of_option(seg, o, option.extra_ms))
        .collect()
}

/// `seg`'s options at `pos`.
fn steps(seg: &ChainSegment, pos: Position) -> Result<Vec<Step<'_>>> {
    let ticks = option_ticks(seg)?;
    (0..seg.options.len())
        .map(|o| {
            Ok(Step {
                chosen: Chosen {
                    segment: seg,
                    option: o,
                },
                own: pos.own(seg, o)?,
                kept: seg.options[o].kept,
                ticks: ticks[o],
            })
        })
        .collect()
}

/// Every node of a consistent chain (see [`consistent`]) ready to be searched, by one forward
/// pass over the nodes (and over the DAG of each splittable node's children and runs).
pub(super) fn reach(chain: &ChainModel) -> Result<Vec<NodeReach<'_>>> {
    let (reaches, _) = reach_nodes(
        &chain.nodes,
        Position::start(chain)?,
        Reach::start(chain.base),
        chain.base,
    )?;
    Ok(reaches)
}

fn reach_nodes(
    nodes: &[ChainNode],
    mut pos: Position,
    mut at: Reach,
    base: u64,
) -> Result<(Vec<NodeReach<'_>>, Reach)> {
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        let whole = node.segment();
        let whole_steps = steps(whole, pos)?;
        let mut next = at.step(&whole_steps, base);
        let mut inner = Vec::new();
        let mut part_reaches = Vec::new();
        let mut runs_from = Vec::new();
        if let ChainNode::Splittable { parts, runs, .. } = node {
            let n = parts.len();
            let mut reached: Vec<Option<Reach>> = vec![None; n + 1];
            reached[0] = Some(at);
            runs_from = vec![Vec::new(); n];
            let mut p = pos;
            for i in 0..n {
                let here = reached[i]
                    .ok_or_else(|| SearchError::Internal("a child of a split node is unreachable".into()))?;
                inner.push(here);
                let (mut r, end) = reach_nodes(&parts[i..i + 1], p, here, base)?;
                part_reaches.push(r.remove(0));
                reached[i + 1] = Some(reached[i + 1].map_or(end, |x| x.min(end)));
                for run in runs.iter().filter(|r| run_bounds(r)[0] == i) {
                    let e = run_bounds(run)[1];
                    if e <= i || e > n {
                        continue;
                    }
                    let run_steps = steps(run, p)?;
                    let end = here.step(&run_steps, base);
                    reached[e] = Some(reached[e].map_or(end, |x| x.min(end)));
                    runs_from[i].push((e, run_steps));
                }
                p = p.after(parts[i].segment())?;
            }
            if let Some(split) = reached[n] {
                next = next.min(split);
            }
        }
        out.push(NodeReach {
            start: at,
            whole: whole_steps,
            inner,
            parts: part_reaches,
            runs_from,
        });
        at = next;
        pos = pos.after(whole)?;
    }
    Ok((out, at))
}
