//! A common x axis for two timelines of one step: events are grouped into segments (phase and
//! module, `features.3` in forward), the two segment sequences are matched in order (longest
//! common subsequence), and matched segments get one span of the axis, as wide as the longer of
//! the two. A plan that adds events (recomputation, packing) therefore widens its module's span
//! instead of shifting everything after it, and both curves stay under the same module.

use crate::timeline::KindTimeline;
use memopt_core::memory::Phase;

/// The phases a chart marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Outside forward, backward and the optimizer: the state before the step, and the end of
    /// the step, where the tape, the saved tensors and the gradients are released.
    Setup,
    /// Forward pass.
    Forward,
    /// Backward pass (recomputation included: it happens inside a module's backward).
    Backward,
    /// Optimizer update.
    Optimizer,
}

impl Stage {
    fn of(phase: Phase) -> Stage {
        match phase {
            Phase::Setup => Stage::Setup,
            Phase::Forward => Stage::Forward,
            Phase::Backward | Phase::Recompute => Stage::Backward,
            Phase::Optimizer => Stage::Optimizer,
        }
    }

    /// Its name on the chart.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Setup => "release",
            Stage::Forward => "forward",
            Stage::Backward => "backward",
            Stage::Optimizer => "optimizer",
        }
    }
}

/// The module a segment belongs to: the first two components of the path (`features.3`).
fn module_key(path: &str) -> &str {
    match path.match_indices('.').nth(1) {
        Some((i, _)) => &path[..i],
        None => path,
    }
}

/// Consecutive points (from 1: point 0 is the state before the step) with the same stage and
/// module.
fn segments(t: &KindTimeline) -> Vec<((Stage, String), std::ops::Range<usize>)> {
    let mut out: Vec<((Stage, String), std::ops::Range<usize>)> = Vec::new();
    for (i, (phase, path)) in t.scopes.iter().enumerate().skip(1) {
        let key = (Stage::of(*phase), module_key(path).to_string());
        match out.last_mut() {
            Some((k, r)) if *k == key => r.end = i + 1,
            _ => out.push((key, i..i + 1)),
        }
    }
    out
}

/// Pairs of matched segment indices, in order (longest common subsequence of the keys).
fn matching<K: PartialEq>(a: &[K], b: &[K]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut len = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[i][j] = if a[i] == b[j] {
                len[i + 1][j + 1] + 1
            } else {
                len[i + 1][j].max(len[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if len[i + 1][j] >= len[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The common axis: the x position of every point of each timeline, the stages as spans of
/// the axis, and its length.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// x of each point of the first timeline.
    pub first: Vec<f64>,
    /// x of each point of the second timeline (empty without one).
    pub second: Vec<f64>,
    /// (stage, start, end) spans, in order.
    pub stages: Vec<(Stage, f64, f64)>,
    /// The axis length.
    pub length: f64,
}

/// Lays `a` (and `b`, when given) out on one axis.
pub fn align(a: &KindTimeline, b: Option<&KindTimeline>) -> Axis {
    let sa = segments(a);
    let sb = b.map(segments).unwrap_or_default();
    let keys = |s: &[((Stage, String), std::ops::Range<usize>)]| {
        s.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
    };
    let pairs = matching(&keys(&sa), &keys(&sb));
    let mut xa = vec![0.0; a.points.len()];
    let mut xb = vec![0.0; b.map_or(0, |t| t.points.len())];
    let mut stages: Vec<(Stage, f64, f64)> = Vec::new();
    let mut x = 0.0;
    let place = |xs: &mut Vec<f64>, r: &std::ops::Range<usize>, start: f64, width: f64| {
        let n = r.len() as f64;
        for (k, i) in r.clone().enumerate() {
            xs[i] = start + (k + 1) as f64 * width / n;
        }
    };
    let mut push_stage = |stage: Stage, from: f64, to: f64| match stages.last_mut() {
        Some((s, _, end)) if *s == stage => *end = to,
        _ => stages.push((stage, from, to)),
    };
    let (mut i, mut j) = (0, 0);
    for (pi, pj) in pairs.into_iter().chain(std::iter::once((sa.len(), sb.len()))) {
        // Unmatched segments of either timeline get their own span.
        for (key, r) in &sa[i..pi] {
            place(&mut xa, r, x, r.len() as f64);
            push_stage(key.0, x, x + r.len() as f64);
            x += r.len() as f64;
        }
        for (key, r) in &sb[j..pj] {
            place(&mut xb, r, x, r.len() as f64);
            push_stage(key.0, x, x + r.len() as f64);
            x += r.len() as f64;
        }
        if pi < sa.len() && pj < sb.len() {
            let (ra, rb) = (&sa[pi].1, &sb[pj].1);
            let width = ra.len().max(rb.len()) as f64;
            place(&mut xa, ra, x, width);
            place(&mut xb, rb, x, width);
            push_stage(sa[pi].0.0, x, x + width);
            x += width;
        }
        i = pi + 1;
        j = pj + 1;
    }
    // Points between segments (none today) keep the position of the point before them.
    for xs in [&mut xa, &mut xb] {
        for k in 1..xs.len() {
            if xs[k] < xs[k - 1] {
                xs[k] = xs[k - 1];
            }
        }
    }
    Axis {
        first: xa,
        second: xb,
        stages,
        length: x,
    }
}

/// Spans of the axis where `t` recomputes (phase `Recompute`), from its x positions `xs`.
pub fn recompute_spans(t: &KindTimeline, xs: &[f64]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut open: Option<f64> = None;
    let n = t.scopes.len().min(xs.len());
    for i in 1..n {
        match (t.scopes[i].0 == Phase::Recompute, open) {
            (true, None) => open = Some(xs[i - 1]),
            (false, Some(s)) => {
                out.push((s, xs[i - 1]));
                open = None;
            }
            _ => {}
        }
    }
    if let Some(s) = open {
        out.push((s, xs[n - 1]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memopt_core::MemoryKind;

    fn timeline(scopes: &[(Phase, &str)]) -> KindTimeline {
        KindTimeline {
            points: vec![[0; MemoryKind::COUNT]; scopes.len()],
            scopes: scopes.iter().map(|(p, s)| (*p, s.to_string())).collect(),
            ..KindTimeline::default()
        }
    }

    #[test]
    fn extra_events_widen_their_module_and_keep_the_rest_aligned() {
        use Phase::*;
        let base = timeline(&[
            (Setup, ""),
            (Forward, "a"),
            (Forward, "b"),
            (Backward, "b"),
            (Backward, "a"),
        ]);
        let plan = timeline(&[
            (Setup, ""),
            (Forward, "a"),
            (Forward, "b"),
            (Backward, "b"),
            (Recompute, "a"),
            (Recompute, "a"),
            (Backward, "a"),
        ]);
        let axis = align(&base, Some(&plan));
        // The backward of `a` holds 1 baseline event and 3 planned ones: 3 wide, ending together.
        assert_eq!(axis.length, 6.0);
        assert_eq!(axis.first[4], 6.0);
        assert_eq!(axis.second[6], 6.0);
        // Everything before it sits at the same place in both.
        assert_eq!(&axis.first[..4], &axis.second[..4]);
        let names: Vec<&str> = axis.stages.iter().map(|s| s.0.name()).collect();
        assert_eq!(names, ["forward", "backward"]);
        assert_eq!(recompute_spans(&plan, &axis.second), vec![(3.0, 5.0)]);
    }
}
