//! The search over suffixes, from the end of the chain to its start (see the proof in
//! [`super`]). A suffix starting at a position is summed up by two numbers: `c`, the most
//! bytes any of its terms holds above `base +` (bytes the prefix before it keeps), and its
//! time. A front is the suffixes no other suffix beats on both, sorted by `c` (ascending) and
//! time (strictly descending).

use super::Caps;
use super::bounds::{NodeReach, Reach, Step};
use super::ticks::Ticks;
use crate::Result;
use crate::chain::{Chosen, add};
use std::rc::Rc;

/// A plan suffix's choices, first first; shared between the suffixes that extend it.
pub(super) struct Link<'a> {
    pub(super) chosen: Chosen<'a>,
    pub(super) next: Option<Rc<Link<'a>>>,
}

impl Drop for Link<'_> {
    /// Iterative, so that dropping a long plan does not recurse once per segment.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(rc) = next {
            match Rc::try_unwrap(rc) {
                Ok(mut link) => next = link.next.take(),
                Err(_) => break,
            }
        }
    }
}

/// One suffix on a front.
#[derive(Clone)]
pub(super) struct Suffix<'a> {
    /// Its largest term above `base +` the prefix's kept bytes (lifted, see [`Window`]), in
    /// bytes.
    pub(super) c: u64,
    /// Its extra time.
    pub(super) ticks: Ticks,
    /// Its choices; `None` only for the empty suffix at the chain's end, which has no term
    /// (its `c` is 0 and counts for nothing).
    pub(super) plan: Option<Rc<Link<'a>>>,
}

/// What a suffix at one position may be: lifted to at least `floor`, and kept only when `c`
/// and its time are within the caps the prefixes reaching the position leave.
struct Window {
    floor: u64,
    max_c: u64,
    max_ticks: Ticks,
    /// The `c` beyond which every plan through the position peaks beyond 64 bits.
    overflow_c: u64,
    /// `base +` the least bytes the prefixes keep, for the error naming such a sum.
    held: u64,
}

/// The search's fixed settings.
struct Search {
    base: u64,
    caps: Caps,
}

impl Search {
    /// The window of a position that prefixes reach with `reach`; `None` when no suffix there
    /// can be within the caps.
    fn window(&self, reach: &Reach) -> Option<Window> {
        let floor = (reach.headroom - i128::from(self.base)).clamp(0, i128::from(u64::MAX)) as u64;
        let held = self.base.saturating_add(reach.kept);
        let window = Window {
            floor,
            max_c: self.caps.peak.checked_sub(held)?,
            max_ticks: self.caps.ticks.checked_sub(reach.ticks)?,
            overflow_c: u64::MAX - held,
            held,
        };
        #[cfg(test)]
        let window = {
            let (floor, c, t) = super::TIGHTEN.with(|k| k.get());
            Window {
                floor: window.floor.saturating_add(floor),
                max_c: window.max_c.checked_sub(c)?,
                max_ticks: window.max_ticks.checked_sub(t)?,
                ..window
            }
        };
        Some(window)
    }
}

/// A front extended by a step (or taken as it is).
struct Source<'s, 'a> {
    front: &'s [Suffix<'a>],
    step: Option<Step<'a>>,
}

/// `front` extended by each of `steps`, appended to `out`.
fn extend<'s, 'a>(front: &'s [Suffix<'a>], steps: &[Step<'a>], out: &mut Vec<Source<'s, 'a>>) {
    out.extend(steps.iter().map(|s| Source {
        front,
        step: Some(*s),
    }));
}

/// A suffix being considered: its figures and where it comes from.
#[derive(Clone, Copy)]
struct Cand {
    c: u64,
    ticks: Ticks,
    source: u32,
    index: u32,
}

/// Reused buffers of [`gather`].
#[derive(Default)]
struct Buffers {
    acc: Vec<Cand>,
    next: Vec<Cand>,
    mapped: Vec<Cand>,
}

/// The front of every suffix `sources` make at a position with `window`.
fn gather<'a>(
    sources: &[Source<'_, 'a>],
    window: Option<&Window>,
    first_only: bool,
    bufs: &mut Buffers,
) -> Result<Vec<Suffix<'a>>> {
    let Some(w) = window else {
        return Ok(Vec::new());
    };
    bufs.acc.clear();
    for (si, source) in sources.iter().enumerate() {
        let (Some(first), Some(last)) = (source.front.first(), source.front.last()) else {
            continue;
        };
        let (own, kept, dt) = match source.step {
            Some(s) => {
                // The largest `c` and the largest time are at the two ends: checked once.
                let path = &s.chosen.segment.path;
                add(path, "the bytes kept for the backward pass", s.kept, last.c)?;
                first.ticks.checked_add(s.ticks).ok_or_else(|| {
                    crate::SearchError::InvalidSetting(format!(
                        "segment '{path}': the extra time of a plan is beyond 2^128 fs"
                    ))
                })?;
                (s.own, s.kept, s.ticks)
            }
            None => (0, 0, 0),
        };
        // Non-decreasing in `c`, strictly decreasing in time; of equal `c` only the last
        // (least time) is kept.
        bufs.mapped.clear();
        for (i, e) in source.front.iter().enumerate() {
            let ticks = e.ticks + dt;
            if ticks > w.max_ticks {
                continue;
            }
            // The empty suffix (the chain's end) has no term: only the step's own count.
            let later = if e.plan.is_some() { kept + e.c } else { 0 };
            let c = own.max(later).max(w.floor);
            if c > w.max_c {
                if c > w.overflow_c
                    && let Some(s) = source.step
                {
                    // Every plan through this suffix holds more than 64 bits' worth.
                    add(
                        &s.chosen.segment.path,
                        "the bytes held at its largest term",
                        w.held,
                        c,
                    )?;
                }
                break;
            }
            let cand = Cand {
                c,
                ticks,
                source: si as u32,
                index: i as u32,
            };
            match bufs.mapped.last_mut() {
                Some(l) if l.c == c => *l = cand,
                _ => bufs.mapped.push(cand),
            }
        }
        #[cfg(test)]
        super::CREATED.with(|n| n.set(n.get() + bufs.mapped.len() as u64));
        merge(&bufs.acc, &bufs.mapped, &mut bufs.next);
        std::mem::swap(&mut bufs.acc, &mut bufs.next);
    }
    if first_only {
        bufs.acc.truncate(1);
    }
    Ok(bufs
        .acc
        .iter()
        .map(|cand| {
            let source = &sources[cand.source as usize];
            let entry = &source.front[cand.index as usize];
            let plan = match source.step {
                Some(s) => Some(Rc::new(Link {
                    chosen: s.chosen,
                    next: entry.plan.clone(),
                })),
                None => entry.plan.clone(),
            };
            Suffix {
                c: cand.c,
                ticks: cand.ticks,
                plan,
            }
        })
        .collect())
}

/// The front of two fronts (each with `c` strictly ascending and time strictly descending):
/// in order of (`c`, time), each candidate faster than every one before it.
fn merge(a: &[Cand], b: &[Cand], out: &mut Vec<Cand>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    let mut best: Option<Ticks> = None;
    while i < a.len() || j < b.len() {
        let take_a = j == b.len() || (i < a.len() && (a[i].c, a[i].ticks) <= (b[j].c, b[j].ticks));
        let x = if take_a {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        if best.is_none_or(|t| x.ticks < t) {
            best = Some(x.ticks);
            out.push(x);
        }
    }
}

/// The front at the start of `nodes` (with their reaches), followed by the suffixes `after`.
fn nodes_front<'a>(
    search: &Search,
    nodes: &[NodeReach<'a>],
    after: Vec<Suffix<'a>>,
    bufs: &mut Buffers,
) -> Result<Vec<Suffix<'a>>> {
    let mut front = after;
    for node in nodes.iter().rev() {
        front = node_front(search, node, &front, bufs)?;
    }
    Ok(front)
}

/// The front at the start of `node`, followed by the suffixes `after`: run whole under each
/// option, or (a splittable node) as its children and runs of them, position by position from
/// the last child back.
fn node_front<'a>(
    search: &Search,
    node: &NodeReach<'a>,
    after: &[Suffix<'a>],
    bufs: &mut Buffers,
) -> Result<Vec<Suffix<'a>>> {
    let window = search.window(&node.start);
    let first_only = search.caps.first_only;
    let mut sources = Vec::new();
    extend(after, &node.whole, &mut sources);
    let whole = gather(&sources, window.as_ref(), first_only, bufs)?;
    let n = node.parts.len();
    if n == 0 {
        return Ok(whole);
    }
    // Each front is dropped once the last position reading it (the child before it, or the
    // earliest run ending there) is done.
    let mut last_reader: Vec<usize> = (0..=n).map(|e| e.saturating_sub(1)).collect();
    for (i, runs) in node.runs_from.iter().enumerate() {
        for (end, _) in runs {
            last_reader[*end] = last_reader[*end].min(i);
        }
    }
    let mut drop_after: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, &reader) in last_reader.iter().enumerate().take(n).skip(1) {
        drop_after[reader].push(e);
    }
    let mut at: Vec<Option<Vec<Suffix<'a>>>> = vec![None; n];
    for i in (0..n).rev() {
        let front_at = |e: usize| -> &[Suffix<'a>] {
            if e == n {
                after
            } else {
                at[e].as_deref().unwrap_or_default()
            }
        };
        let child = node_front(search, &node.parts[i], front_at(i + 1), bufs)?;
        let mut sources = vec![Source {
            front: &child,
            step: None,
        }];
        for (end, steps) in &node.runs_from[i] {
            extend(front_at(*end), steps, &mut sources);
        }
        let here = gather(&sources, search.window(&node.inner[i]).as_ref(), first_only, bufs)?;
        drop(sources);
        at[i] = Some(here);
        for &e in &drop_after[i] {
            at[e] = None;
        }
    }
    let split = at[0].take().unwrap_or_default();
    let sources = [
        Source {
            front: &whole,
            step: None,
        },
        Source {
            front: &split,
            step: None,
        },
    ];
    gather(&sources, window.as_ref(), first_only, bufs)
}

/// The front of whole plans of a consistent chain (its nodes prepared, [`super::bounds::reach`])
/// within `caps`: each suffix's `c` at the chain's start (its floor is 0 there, nothing is
/// lifted) with its time and plan.
pub(super) fn search<'a>(base: u64, nodes: &[NodeReach<'a>], caps: Caps) -> Result<Vec<Suffix<'a>>> {
    let search = Search { base, caps };
    let end = Suffix {
        c: 0,
        ticks: 0,
        plan: None,
    };
    nodes_front(&search, nodes, vec![end], &mut Buffers::default())
}
