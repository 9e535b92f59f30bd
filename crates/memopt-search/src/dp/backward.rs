//! The search over suffixes, from the end of the chain to its start (see the proof in
//! [`super`]). A suffix starting at a position is summed up by two numbers: `c`, the most
//! bytes any of its terms holds above `base +` (bytes the prefix before it keeps), and its
//! time. A front is the suffixes no other suffix beats on both, sorted by `c` (ascending) and
//! time (strictly descending).

use super::Caps;
use super::bounds::{NodeReach, Reach, Step};
use super::ticks::Ticks;
use crate::chain::{ChainSegment, Chosen, add};
use crate::{Result, SearchError};

/// The end of a plan suffix's list of choices.
pub(super) const END: u32 = u32::MAX;

/// One choice of a plan suffix and where the rest of it is: suffixes share the choices of the
/// suffixes they extend, each kept once in the search's [`Links`].
#[derive(Clone, Copy)]
pub(super) struct Link<'a> {
    segment: &'a ChainSegment,
    option: u32,
    next: u32,
}

/// Every choice the search keeps, addressed by index.
#[derive(Default)]
pub(super) struct Links<'a> {
    links: Vec<Link<'a>>,
}

impl<'a> Links<'a> {
    fn push(&mut self, chosen: Chosen<'a>, next: u32) -> Result<u32> {
        let at = u32::try_from(self.links.len())
            .ok()
            .filter(|&at| at != END)
            .ok_or_else(|| SearchError::Internal("the search kept more than 2^32 choices".into()))?;
        self.links.push(Link {
            segment: chosen.segment,
            option: chosen.option as u32,
            next,
        });
        Ok(at)
    }

    /// The plan starting at `head`, in forward order.
    pub(super) fn plan(&self, mut head: u32) -> Vec<Chosen<'a>> {
        let mut plan = Vec::new();
        while let Some(link) = self.links.get(head as usize) {
            plan.push(Chosen {
                segment: link.segment,
                option: link.option as usize,
            });
            head = link.next;
        }
        plan
    }
}

/// One suffix on a front.
#[derive(Clone, Copy)]
pub(super) struct Suffix {
    /// Its largest term above `base +` the prefix's kept bytes (lifted, see [`Window`]), in
    /// bytes.
    pub(super) c: u64,
    /// Its extra time.
    pub(super) ticks: Ticks,
    /// Its first choice in [`Links`]; [`END`] only for the empty suffix at the chain's end,
    /// which has no term (its `c` is 0 and counts for nothing).
    pub(super) plan: u32,
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
    front: &'s [Suffix],
    step: Option<Step<'a>>,
}

/// `front` extended by each of `steps`, appended to `out`.
fn extend<'s, 'a>(front: &'s [Suffix], steps: &[Step<'a>], out: &mut Vec<Source<'s, 'a>>) {
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

/// A source's suffixes as they are at the position, in order of `c` (time strictly falling),
/// those over the caps left out and of equal `c` only the last (the fastest).
struct Mapped<'s> {
    front: &'s [Suffix],
    next: usize,
    own: u64,
    kept: u64,
    dt: Ticks,
    floor: u64,
    max_c: u64,
    source: u32,
}

impl Mapped<'_> {
    fn at(&self, j: usize) -> Cand {
        let e = self.front[j];
        // The empty suffix (the chain's end) has no term: only the step's own counts.
        let later = if e.plan != END { self.kept + e.c } else { 0 };
        Cand {
            c: self.own.max(later).max(self.floor),
            ticks: e.ticks + self.dt,
            source: self.source,
            index: j as u32,
        }
    }
}

impl Iterator for Mapped<'_> {
    type Item = Cand;

    fn next(&mut self) -> Option<Cand> {
        if self.next >= self.front.len() {
            return None;
        }
        let mut cand = self.at(self.next);
        if cand.c > self.max_c {
            self.next = self.front.len();
            return None;
        }
        self.next += 1;
        while self.next < self.front.len() {
            let later = self.at(self.next);
            if later.c != cand.c {
                break;
            }
            cand = later;
            self.next += 1;
        }
        Some(cand)
    }
}

/// Reused buffers of [`gather`].
#[derive(Default)]
struct Buffers {
    acc: Vec<Cand>,
    next: Vec<Cand>,
}

/// The front of every suffix `sources` make at a position with `window`; the kept choices
/// go to `links`.
fn gather<'a>(
    sources: &[Source<'_, 'a>],
    window: Option<&Window>,
    first_only: bool,
    bufs: &mut Buffers,
    links: &mut Links<'a>,
) -> Result<Vec<Suffix>> {
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
                let c = add(path, "the bytes kept for the backward pass", s.kept, last.c)?;
                first.ticks.checked_add(s.ticks).ok_or_else(|| {
                    SearchError::InvalidSetting(format!(
                        "segment '{path}': the extra time of a plan is beyond 2^128 fs"
                    ))
                })?;
                if s.own.max(c) > w.overflow_c {
                    // Every plan through such a suffix holds more than 64 bits' worth.
                    add(path, "the bytes held at its largest term", w.held, s.own.max(c))?;
                }
                (s.own, s.kept, s.ticks)
            }
            None => (0, 0, 0),
        };
        // Time strictly falls along the front: those over the time cap come first.
        let start = source.front.partition_point(|e| e.ticks + dt > w.max_ticks);
        let mapped = Mapped {
            front: source.front,
            next: start,
            own,
            kept,
            dt,
            floor: w.floor,
            max_c: w.max_c,
            source: si as u32,
        };
        #[cfg(test)]
        super::CREATED.with(|n| n.set(n.get() + (source.front.len() - start) as u64));
        merge(&bufs.acc, mapped, &mut bufs.next);
        std::mem::swap(&mut bufs.acc, &mut bufs.next);
    }
    if first_only {
        bufs.acc.truncate(1);
    }
    let mut out = Vec::with_capacity(bufs.acc.len());
    for cand in &bufs.acc {
        let source = &sources[cand.source as usize];
        let entry = source.front[cand.index as usize];
        let plan = match source.step {
            Some(s) => links.push(s.chosen, entry.plan)?,
            None => entry.plan,
        };
        out.push(Suffix {
            c: cand.c,
            ticks: cand.ticks,
            plan,
        });
    }
    Ok(out)
}

/// The front of a front and a source's suffixes (each with `c` strictly ascending and time
/// strictly descending): in order of (`c`, time), each candidate faster than every one before
/// it.
fn merge(a: &[Cand], b: Mapped<'_>, out: &mut Vec<Cand>) {
    out.clear();
    let mut b = b.peekable();
    let mut i = 0;
    let mut best: Option<Ticks> = None;
    loop {
        let x = match (a.get(i), b.peek()) {
            (None, None) => break,
            (Some(&x), None) => {
                i += 1;
                x
            }
            (Some(&x), Some(y)) if (x.c, x.ticks) <= (y.c, y.ticks) => {
                i += 1;
                x
            }
            (_, Some(_)) => match b.next() {
                Some(y) => y,
                None => break,
            },
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
    after: Vec<Suffix>,
    bufs: &mut Buffers,
    links: &mut Links<'a>,
) -> Result<Vec<Suffix>> {
    let mut front = after;
    for node in nodes.iter().rev() {
        front = node_front(search, node, &front, bufs, links)?;
    }
    Ok(front)
}

/// The front at the start of `node`, followed by the suffixes `after`: run whole under each
/// option, or (a splittable node) as its children and runs of them, position by position from
/// the last child back.
fn node_front<'a>(
    search: &Search,
    node: &NodeReach<'a>,
    after: &[Suffix],
    bufs: &mut Buffers,
    links: &mut Links<'a>,
) -> Result<Vec<Suffix>> {
    let window = search.window(&node.start);
    let first_only = search.caps.first_only;
    let mut sources = Vec::new();
    extend(after, &node.whole, &mut sources);
    let whole = gather(&sources, window.as_ref(), first_only, bufs, links)?;
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
    let mut at: Vec<Option<Vec<Suffix>>> = vec![None; n];
    for i in (0..n).rev() {
        let front_at = |e: usize| -> &[Suffix] {
            if e == n {
                after
            } else {
                at[e].as_deref().unwrap_or_default()
            }
        };
        let part = &node.parts[i];
        // A child that is a plain segment is its options at this very position (its reach is
        // the position's); a splittable child is searched on its own first.
        let child;
        let mut sources = Vec::new();
        if part.parts.is_empty() {
            extend(front_at(i + 1), &part.whole, &mut sources);
        } else {
            child = node_front(search, part, front_at(i + 1), bufs, links)?;
            sources.push(Source {
                front: &child,
                step: None,
            });
        }
        for (end, steps) in &node.runs_from[i] {
            extend(front_at(*end), steps, &mut sources);
        }
        let here = gather(
            &sources,
            search.window(&node.inner[i]).as_ref(),
            first_only,
            bufs,
            links,
        )?;
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
    gather(&sources, window.as_ref(), first_only, bufs, links)
}

/// The front of whole plans of a consistent chain (its nodes prepared, [`super::bounds::reach`])
/// within `caps`: each suffix's `c` at the chain's start (its floor is 0 there, nothing is
/// lifted) with its time and first choice in the returned links.
pub(super) fn search<'a>(base: u64, nodes: &[NodeReach<'a>], caps: Caps) -> Result<(Vec<Suffix>, Links<'a>)> {
    let search = Search { base, caps };
    let end = Suffix {
        c: 0,
        ticks: 0,
        plan: END,
    };
    let mut links = Links::default();
    let front = nodes_front(&search, nodes, vec![end], &mut Buffers::default(), &mut links)?;
    Ok((front, links))
}
