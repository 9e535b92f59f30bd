//! How the chain model splits a container: into its links, except that a link whose own chain
//! starts with a pooling (a leaf without state whose output is smaller than its input, such as
//! the average pool at the start of a CIFAR10-DVS VGG block) becomes two parts, that pooling
//! (the *head*) and the rest of the link. A run of the links before it may then end after the
//! pooling ([`memopt_checkpoint::PlanEntry::into_next`]): the segment hands the pooled
//! gradient to the links before it instead of the whole one, and a time-chunked segment
//! expands it one chunk at a time.

use super::OptionSpace;
use crate::sites::Site;
use memopt_checkpoint::module::ModuleCost;

/// One part of a container's chain in the chain model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Piece {
    /// Link `c` of the chain, whole.
    Link(usize),
    /// The first link of link `c`'s own chain (its pooling).
    Head(usize),
    /// Link `c` without its first link.
    Rest(usize),
}

/// A run of consecutive parts as one segment: its site and the parts `[start, end)` it covers
/// among the node's parts when they are not the chain's links one for one.
pub(super) struct PartRun {
    /// The segment (`path` and `run` as a plan names it).
    pub(super) site: Site,
    /// The parts it covers, when named otherwise.
    pub(super) span: Option<[usize; 2]>,
}

impl PartRun {
    /// Whether it starts at the chain's first part.
    pub(super) fn starts_chain(&self) -> bool {
        match (self.span, self.site.run) {
            (Some([a, _]), _) | (None, Some([a, _])) => a == 0,
            (None, None) => false,
        }
    }
}

/// Whether `part` (a link of a chain) starts with a pooling that a run before it may take.
fn has_head(part: &Site) -> bool {
    let chain = part.chain();
    part.runs_allowed
        && part.run.is_none()
        && chain.len() >= 2
        && chain[0].chain().is_empty()
        && !chain[0].stateful
        && chain[0].time_separable
        && chain[0].outputs.iter().map(|o| o.bytes()).sum::<u64>() < chain[0].input_bytes()
}

/// The parts of `site`'s chain: its links, with each link after the first that starts with a
/// pooling split into [`Piece::Head`] and [`Piece::Rest`] ([`OptionSpace::split_poolings`]).
/// Only containers that run their own children as a chain and inline none split so.
pub(super) fn pieces(site: &Site, space: &OptionSpace) -> Vec<Piece> {
    let chain = site.chain();
    let splits = space.split_poolings && site.runs_allowed && site.links.is_empty();
    let mut out = Vec::with_capacity(chain.len());
    for (c, part) in chain.iter().enumerate() {
        if splits && c > 0 && has_head(part) {
            out.push(Piece::Head(c));
            out.push(Piece::Rest(c));
        } else {
            out.push(Piece::Link(c));
        }
    }
    out
}

/// The site of link `c` without its first link.
pub(super) fn rest_site(site: &Site, c: usize) -> Site {
    let link = &site.chain()[c];
    link.run_of(1, link.chain().len())
}

/// The site of one part (cloned: a part's site is small next to measuring it).
pub(super) fn piece_site(site: &Site, piece: Piece) -> Site {
    match piece {
        Piece::Link(c) => site.chain()[c].clone(),
        Piece::Head(c) => site.chain()[c].chain()[0].clone(),
        Piece::Rest(c) => rest_site(site, c),
    }
}

/// The runs of `site`'s chain model: every run of two or more parts that touches at most
/// [`OptionSpace::max_run`] links and is not the whole chain, that starts where a link starts
/// (not at a [`Piece::Rest`]), named as a plan names it. Without heads these are the runs of
/// consecutive links, as before heads existed (`span` `None`).
pub(super) fn part_runs(site: &Site, pieces: &[Piece], space: &OptionSpace) -> Vec<PartRun> {
    let p = pieces.len();
    let mut out = Vec::new();
    if !site.runs_allowed {
        return out;
    }
    let split = pieces.len() != site.chain().len();
    let link_of = |piece: Piece| match piece {
        Piece::Link(c) | Piece::Head(c) | Piece::Rest(c) => c,
    };
    for start in 0..p {
        if matches!(pieces[start], Piece::Rest(_)) {
            continue;
        }
        for end in start + 2..=p {
            let links = link_of(pieces[end - 1]) - link_of(pieces[start]) + 1;
            if links > space.max_run {
                break;
            }
            if (start, end) == (0, p) {
                continue;
            }
            let run = if split {
                named_run(site, &pieces[start..end])
            } else {
                site.run_of(start, end)
            };
            out.push(PartRun {
                site: run,
                span: split.then_some([start, end]),
            });
        }
    }
    out
}

/// The site of a run of parts (two or more, the first not a [`Piece::Rest`]): link `c` whole
/// when the parts are its head and rest, otherwise a run of the container's links that goes on
/// into the next link's head when it ends there.
fn named_run(site: &Site, parts: &[Piece]) -> Site {
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if let (Piece::Head(a), Piece::Rest(b)) = (first, last)
        && a == b
    {
        return site.chain()[a].clone();
    }
    let start = match first {
        Piece::Link(c) | Piece::Head(c) | Piece::Rest(c) => c,
    };
    let (end, into_next) = match last {
        Piece::Link(c) | Piece::Rest(c) => (c + 1, 0),
        Piece::Head(c) => (c, 1),
    };
    let sites: Vec<Site> = parts.iter().map(|&p| piece_site(site, p)).collect();
    let mut run = site.run_of(start, end.max(start + 1));
    run.run = Some([start, end]);
    run.into_next = into_next;
    run.inputs = sites[0].inputs.clone();
    run.outputs = sites[sites.len() - 1].outputs.clone();
    run.cost = sites
        .iter()
        .map(|s| s.cost)
        .fold(ModuleCost::ZERO, ModuleCost::plus);
    run.time_separable = sites.iter().all(|s| s.time_separable);
    run.batch_norms = sites.iter().map(|s| s.batch_norms).sum();
    run.stateful = sites.iter().any(|s| s.stateful);
    run
}

/// The runs inside link `c`'s rest: the runs of its own chain from its second link on, but not
/// all of those (that is the rest itself), with the parts they cover among the rest's.
pub(super) fn rest_runs(site: &Site, c: usize, space: &OptionSpace) -> Vec<PartRun> {
    let link = &site.chain()[c];
    let m = link.chain().len();
    let mut out = Vec::new();
    for start in 1..m {
        for end in start + 2..=m.min(start + space.max_run) {
            if (start, end) != (1, m) {
                out.push(PartRun {
                    site: link.run_of(start, end),
                    span: Some([start - 1, end - 1]),
                });
            }
        }
    }
    out
}
