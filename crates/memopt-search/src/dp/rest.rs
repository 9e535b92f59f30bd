//! The least completion of every prefix position: for each place the dynamic program can stand
//! in the chain, the least over every way of running what follows of its largest term above
//! `base + K` (`K`: the bytes the prefix keeps). Every later term is `base + K +` (bytes the
//! later segments before it keep) `+` (its own figure where it runs), so this least is
//! `G(pos) = min over the next segment's options o of max(c_o, kept_o + G(next))`, computed
//! backwards over the chain (and over the DAG of a split node's children and runs). It is
//! exact: `max(M, base + K + G)` is the least peak any completion of the prefix reaches.

use crate::chain::{ChainModel, ChainNode, ChainSegment, run_bounds};

/// What follows one node of a list, and inside a splittable node, what follows each position
/// among its children; `None` where nothing follows (no term left to bound).
pub(super) struct NodeRest {
    /// Least largest term of everything after the node.
    pub after: Option<u64>,
    /// For a splittable node: the same at each position among its children.
    pub split: Option<SplitRest>,
}

/// The least completions inside a split node.
pub(super) struct SplitRest {
    /// `at[i]`: from the start of child `i` (`at[n]`: after the node).
    pub at: Vec<Option<u64>>,
    /// Each child's own.
    pub parts: Vec<NodeRest>,
}

/// Position-dependent totals of the walk, in bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Position {
    states_total: u64,
    grads_total: u64,
    states_done: u64,
    grads_done: u64,
}

impl Position {
    fn after(mut self, seg: &ChainSegment) -> Position {
        self.states_done = self.states_done.saturating_add(seg.states);
        self.grads_done = self.grads_done.saturating_add(seg.param_grads);
        self
    }

    /// The least over `seg`'s options of `max(own term, kept + what follows)`, where `own
    /// term` is its larger term above base and what earlier segments keep. Saturating: a sum
    /// beyond 64 bits makes the walk itself fail.
    fn least(&self, seg: &ChainSegment, next: Option<u64>) -> u64 {
        let later = self
            .grads_total
            .saturating_sub(self.grads_done.saturating_add(seg.param_grads));
        seg.options
            .iter()
            .map(|o| {
                let forward = self.states_done.saturating_add(o.forward_peak);
                let backward = self
                    .states_total
                    .saturating_add(later)
                    .saturating_add(o.backward_peak);
                let own = forward.max(backward);
                next.map_or(own, |g| own.max(o.kept.saturating_add(g)))
            })
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The least completions of `chain`, or `None` when a split node's children or runs do not
/// hold exactly the states and gradients of what they replace (the positions would then depend
/// on the path, and the search runs without lifting).
pub(super) fn lay_out(chain: &ChainModel) -> crate::Result<Option<Vec<NodeRest>>> {
    let start = Position {
        states_total: chain.states_total()?,
        grads_total: chain.param_grads_total()?,
        states_done: 0,
        grads_done: 0,
    };
    let mut consistent = true;
    let (rests, _) = lay(&chain.nodes, start, None, &mut consistent);
    Ok(consistent.then_some(rests))
}

/// The rests of `nodes` starting at `start` and followed by `after`, and the least largest
/// term of `nodes` and what follows.
fn lay(
    nodes: &[ChainNode],
    start: Position,
    after: Option<u64>,
    consistent: &mut bool,
) -> (Vec<NodeRest>, Option<u64>) {
    let mut starts = Vec::with_capacity(nodes.len());
    let mut pos = start;
    for n in nodes {
        starts.push(pos);
        pos = pos.after(n.segment());
    }
    let mut rests: Vec<NodeRest> = Vec::with_capacity(nodes.len());
    let mut g = after;
    for (node, pos) in nodes.iter().zip(starts).rev() {
        let (split, value) = match node {
            ChainNode::Segment(seg) => (None, pos.least(seg, g)),
            ChainNode::Splittable { whole, parts, runs } => {
                let mut at_pos = Vec::with_capacity(parts.len() + 1);
                let mut p = pos;
                for part in parts {
                    at_pos.push(p);
                    p = p.after(part.segment());
                }
                at_pos.push(p);
                *consistent &= p == pos.after(whole);
                let n = parts.len();
                let mut at = vec![g; n + 1];
                let mut part_rests = Vec::with_capacity(n);
                for i in (0..n).rev() {
                    let (mut r, v) = lay(&parts[i..i + 1], at_pos[i], at[i + 1], consistent);
                    part_rests.push(r.remove(0));
                    let mut best = v.unwrap_or(u64::MAX);
                    for run in runs.iter().filter(|r| run_bounds(r)[0] == i) {
                        let end = run_bounds(run)[1];
                        if end > n {
                            continue;
                        }
                        *consistent &= at_pos[end] == at_pos[i].after(run);
                        best = best.min(at_pos[i].least(run, at[end]));
                    }
                    at[i] = Some(best);
                }
                part_rests.reverse();
                let value = pos.least(whole, g).min(at[0].unwrap_or(u64::MAX));
                (
                    Some(SplitRest {
                        at,
                        parts: part_rests,
                    }),
                    value,
                )
            }
        };
        rests.push(NodeRest { after: g, split });
        g = Some(value);
    }
    rests.reverse();
    (rests, g)
}
