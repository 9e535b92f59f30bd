//! The search over prefixes, for chains whose positions depend on the path taken (a
//! splittable node whose children or runs do not hold exactly the states and gradients of what
//! they replace; see [`super::bounds::consistent`]). Measured chains never are; this keeps the
//! search exact for any [`ChainModel`] a caller builds.
//!
//! A prefix is its walk (kept bytes `K`, largest term so far `M`, and the totals that depend on
//! the path) and its time; a prefix with `K`, `M` and time no larger than another's is at least
//! as good under every completion (the later terms are `base + K + c`, time only adds), so per
//! position only the prefixes no other one dominates are kept.

use super::Caps;
use super::bounds::option_ticks;
use super::ticks::Ticks;
use crate::Result;
use crate::chain::{ChainModel, ChainNode, ChainSegment, Chosen, Walk, run_bounds};
use std::collections::BTreeMap;
use std::rc::Rc;

/// A prefix's choices, last first; shared between the prefixes that extend it.
struct Trail<'a> {
    chosen: Chosen<'a>,
    prev: Option<Rc<Trail<'a>>>,
}

impl Drop for Trail<'_> {
    /// Iterative, so that dropping a long plan does not recurse once per segment.
    fn drop(&mut self) {
        let mut prev = self.prev.take();
        while let Some(rc) = prev {
            match Rc::try_unwrap(rc) {
                Ok(mut t) => prev = t.prev.take(),
                Err(_) => break,
            }
        }
    }
}

#[derive(Clone)]
struct State<'a> {
    walk: Walk,
    ticks: Ticks,
    trail: Option<Rc<Trail<'a>>>,
}

impl<'a> State<'a> {
    fn plan(&self) -> Vec<Chosen<'a>> {
        let mut out = Vec::new();
        let mut t = self.trail.as_deref();
        while let Some(trail) = t {
            out.push(trail.chosen);
            t = trail.prev.as_deref();
        }
        out.reverse();
        out
    }
}

/// Every prefix extended by every option of `seg`, those over the caps dropped (`M` and time
/// only grow).
fn apply<'a>(states: &[State<'a>], seg: &'a ChainSegment, caps: Caps) -> Result<Vec<State<'a>>> {
    let ticks = option_ticks(seg)?;
    #[cfg(test)]
    super::CREATED.with(|n| n.set(n.get() + (states.len() * seg.options.len()) as u64));
    let mut out = Vec::with_capacity(states.len() * seg.options.len());
    for s in states {
        for (o, option) in seg.options.iter().enumerate() {
            let mut walk = s.walk;
            walk.step(seg, option)?;
            let t = s.ticks.saturating_add(ticks[o]);
            if walk.max > caps.peak || t > caps.ticks {
                continue;
            }
            out.push(State {
                walk,
                ticks: t,
                trail: Some(Rc::new(Trail {
                    chosen: Chosen {
                        segment: seg,
                        option: o,
                    },
                    prev: s.trail.clone(),
                })),
            });
        }
    }
    Ok(out)
}

/// The states no other state dominates on (K, M, time), the first of equal ones: sorted by
/// (K, M, time), a state is dominated exactly when an earlier one has M and time no larger,
/// which a staircase (M -> least time among earlier states with at most that M, strictly
/// falling) answers in O(log n). The path-dependent totals of the walk compare as equal only
/// when they are, so states of different paths never dominate one another.
fn prune(mut states: Vec<State<'_>>) -> Vec<State<'_>> {
    states.sort_by(|a, b| {
        (a.walk.path_key(), a.walk.kept, a.walk.max)
            .cmp(&(b.walk.path_key(), b.walk.kept, b.walk.max))
            .then(a.ticks.cmp(&b.ticks))
    });
    let mut kept: Vec<State<'_>> = Vec::with_capacity(states.len());
    let mut stairs: BTreeMap<u64, Ticks> = BTreeMap::new();
    let mut key = None;
    for s in states {
        if key != Some(s.walk.path_key()) {
            key = Some(s.walk.path_key());
            stairs.clear();
        }
        let dominated = stairs
            .range(..=s.walk.max)
            .next_back()
            .is_some_and(|(_, &t)| t <= s.ticks);
        if dominated {
            continue;
        }
        let above: Vec<u64> = stairs
            .range(s.walk.max..)
            .take_while(|(_, t)| **t >= s.ticks)
            .map(|(&m, _)| m)
            .collect();
        for m in above {
            stairs.remove(&m);
        }
        stairs.insert(s.walk.max, s.ticks);
        kept.push(s);
    }
    kept
}

fn process<'a>(nodes: &'a [ChainNode], mut states: Vec<State<'a>>, caps: Caps) -> Result<Vec<State<'a>>> {
    for node in nodes {
        states = match node {
            ChainNode::Segment(seg) => apply(&states, seg, caps)?,
            ChainNode::Splittable { whole, parts, runs } => {
                let mut both = apply(&states, whole, caps)?;
                both.extend(process_parts(parts, runs, states, caps)?);
                both
            }
        };
        states = prune(states);
    }
    Ok(states)
}

/// The children of a split node as a DAG over positions: from position `i`, child `i` leads to
/// `i + 1` and a run `i..j` to `j`.
fn process_parts<'a>(
    parts: &'a [ChainNode],
    runs: &'a [ChainSegment],
    states: Vec<State<'a>>,
    caps: Caps,
) -> Result<Vec<State<'a>>> {
    let n = parts.len();
    let mut at: Vec<Vec<State<'a>>> = vec![Vec::new(); n + 1];
    at[0] = states;
    for i in 0..n {
        let here = prune(std::mem::take(&mut at[i]));
        for run in runs.iter().filter(|r| run_bounds(r)[0] == i) {
            let end = run_bounds(run)[1];
            if end <= i || end > n {
                continue;
            }
            let reached = apply(&here, run, caps)?;
            at[end].extend(reached);
        }
        let next = process(&parts[i..i + 1], here, caps)?;
        at[i + 1].extend(next);
    }
    Ok(std::mem::take(&mut at[n]))
}

/// Every complete plan no other beats on (peak, time), as (peak, time, plan), within `caps`.
pub(super) fn search(chain: &ChainModel, caps: Caps) -> Result<Vec<(u64, Ticks, Vec<Chosen<'_>>)>> {
    let start = State {
        walk: Walk::start(chain)?,
        ticks: 0,
        trail: None,
    };
    Ok(process(&chain.nodes, vec![start], caps)?
        .iter()
        .map(|s| (s.walk.finish(), s.ticks, s.plan()))
        .filter(|(peak, ticks, _)| *peak <= caps.peak && *ticks <= caps.ticks)
        .collect())
}
