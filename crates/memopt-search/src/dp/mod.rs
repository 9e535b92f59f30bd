//! The optimal plans of a [`ChainModel`]: the Pareto front of (peak, extra time) over every
//! plan the chain allows, found exactly by a dynamic program over plan suffixes, from the end of
//! the chain to its start; every question (least peak, least time within a budget, least peak
//! within a time limit) is a look-up on it.
//!
//! # Why it is exact
//!
//! **Terms.** By [`crate::chain`], a plan's peak is `max(base, update, max_i base + K(<i) +
//! own_i)`, where `K(<i)` is what the segments before segment `i` keep, `update = base + P(all)`
//! and `own_i` is segment `i`'s larger own term under its option, `max(S(<i) + F_i, S(all) +
//! P(>i) + W_i)` (`bounds::Position::own`). When every way through every splittable node
//! leaves the same states and gradients behind (`bounds::consistent`; measured chains do),
//! `S(<i)` and `P(>i)` depend on the position alone, and so does `own_i` for a given option.
//!
//! **1. Suffixes.** A suffix `σ` starting at position `p` has `c(σ)`, the largest over its
//! segments `j` of `K_σ(<j) + own_j` (`K_σ(<j)`: what `σ`'s segments before `j` keep; 0 for the
//! empty suffix), so `c(o·σ) = max(own_o, kept_o + c(σ))`. Completing a prefix `π` that reaches
//! `p` with kept bytes `K_π` and largest term `M_π`, the plan's peak is
//! `max(M_π, base + K_π + c(σ), update)` and its time `t(π) + t(σ)`: non-decreasing in `c(σ)` and
//! in `t(σ)`. So a suffix whose `c` and time are no larger than another's is at least as good
//! after every prefix, and at each position the search keeps only the suffixes no other one
//! beats on both (the front, `backward.rs`). At the start (`K = 0`, `M = base`) the peak is
//! `max(base + c, update)`, non-decreasing in `c`: the front there, so mapped, is the Pareto
//! front of (peak, time) over every plan. Every plan dropped on the way is beaten or equalled
//! on both by a kept one, so every point of the front is reached by a kept plan.
//!
//! **2. Lifting.** Let `H(p)` be the least `M_π - K_π` over the prefixes reaching `p`. For any
//! such prefix and any `c <= H(p) - base`, `base + K_π + c <= M_π`, so `max(M_π, base + K_π + c)
//! = max(M_π, base + K_π + max(c, H(p) - base))`: lifting every suffix's `c` to at least
//! `H(p) - base` changes no plan's peak, and the suffixes below it then tie on `c`, so only the
//! fastest of them stays. `H` comes from one forward pass (`bounds.rs`):
//! `M' - K' = max(M - K, base + own_o) - kept_o` is non-decreasing in `M - K`, so the least is
//! reached from the least; where paths join, the lesser. At the start `H = base`: nothing is
//! lifted there, and the `c` the search ends with is exact.
//!
//! **3. Caps.** A question with a peak limit `B` or a time limit `T` drops the suffixes no plan
//! within the limit can use: every prefix reaching `p` keeps at least `Kmin(p)` and takes at
//! least `Tmin(p)` (the same forward pass), and a plan through a suffix peaks at least at
//! `base + K_π + c` (with `c` lifted or not, by 2) and takes `t(π) + t(σ)`; so suffixes with
//! `base + Kmin(p) + c > B` or `Tmin(p) + t > T` are over the limit in every plan.
//!
//! **4. Questions.** The least time within `B`: the last point of the front capped at `B`
//! (sorted by peak, time strictly falling; of equal times the lower peak). Capping it at a
//! time `T` as well keeps every point with a time up to `T`, so when the front capped at `B`
//! and `T` has a point, its last one is that answer; `FastestWithin` starts at `T = 0` and
//! doubles `T` (from the least time an option adds, up to more than any plan takes) until it
//! has one, so that a fast plan under a generous budget costs the front of the plans at most
//! about twice as slow, not of every plan under the budget. The least peak: a first pass
//! keeps only the least `c` at each position (the least `c` of what follows has optimal
//! substructure: `max(own, kept + c)` is non-decreasing in `c`), which is the least peak; then
//! the front capped at it, its only point being the fastest plan there. The least peak within
//! `T`: the first point of the front capped at `T`.
//!
//! **5. Times** are whole femtoseconds (`ticks.rs`): sums are exact and independent of their
//! order, so "no larger" above is exact (each option's time is rounded once, by at most
//! 0.5 fs; reported times are the plan's own `f64` sums).
//!
//! **Other chains.** When a splittable node's children or runs hold other states or gradients
//! than what they replace, positions depend on the path, and the search runs forward over
//! prefixes instead (`forward.rs`), comparing prefixes with equal path totals on kept bytes,
//! largest term and time (all three: the later terms are `base + K + c`, and `M` stays).
//!
//! `dp::tests` checks every entry point against brute force over every plan of random chains
//! (both kinds), with limits at every plan's own peak and time, and shows that each bound
//! tightened by one byte or one femtosecond makes that comparison fail.
//!
//! **Cost.** Each position merges the fronts its options extend (already sorted) in linear
//! time. The front of a chain whose options trade bytes for time at many granularities grows
//! with its length (about 4 points per layer on a chain of conv-LIF layers), so the work is
//! about `layers × options × front`; caps shrink the front to the plans within the limit.

use crate::Result;
use crate::chain::{ChainModel, ChainNode, ChainSegment, Chosen};
use backward::Links;
use ticks::Ticks;

mod backward;
mod bounds;
mod forward;
mod ticks;

/// A plan found by the dynamic program, with its predicted figures.
#[derive(Debug, Clone)]
pub struct Solution<'a> {
    /// Segments in forward order with their options.
    pub plan: Vec<Chosen<'a>>,
    /// Predicted peak, in bytes.
    pub peak: u64,
    /// Predicted extra time over storing everything, in ms.
    pub extra_ms: f64,
}

/// What a search keeps: suffixes within a peak (bytes) and a time, or only the least `c`.
#[derive(Clone, Copy, Debug)]
struct Caps {
    peak: u64,
    ticks: Ticks,
    first_only: bool,
}

impl Caps {
    const NONE: Caps = Caps {
        peak: u64::MAX,
        ticks: Ticks::MAX,
        first_only: false,
    };
}

#[cfg(test)]
thread_local! {
    /// Test-only: how much the bounds are tightened (floor raised, byte and time caps lowered),
    /// to show that the tests catch a bound that loses plans.
    static TIGHTEN: std::cell::Cell<(u64, u64, Ticks)> = const { std::cell::Cell::new((0, 0, 0)) };
    /// Candidate suffixes (or prefixes) created on this thread, to bound how the work grows.
    static CREATED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A chain ready to be searched: its nodes with their positions' reaches and options' steps
/// when it is consistent (the backward search), `None` otherwise (the forward search).
struct Prepared<'a> {
    chain: &'a ChainModel,
    nodes: Option<Vec<bounds::NodeReach<'a>>>,
    /// Bytes held during the optimizer update.
    update: u64,
}

impl<'a> Prepared<'a> {
    fn new(chain: &'a ChainModel) -> Result<Self> {
        Ok(Prepared {
            chain,
            nodes: if bounds::consistent(chain)? {
                Some(bounds::reach(chain)?)
            } else {
                None
            },
            update: crate::chain::add(
                "",
                "the bytes held during the optimizer update",
                chain.base,
                chain.param_grads_total()?,
            )?,
        })
    }
}

/// A plan on a front: its first choice in the front's [`Links`], or listed.
enum PlanOf<'a> {
    Linked(u32),
    Listed(Vec<Chosen<'a>>),
}

/// One point of a front: the plan's peak (bytes) and time.
struct Point<'a> {
    peak: u64,
    ticks: Ticks,
    plan: PlanOf<'a>,
}

/// The plans of a chain no other beats on (peak, time) within some caps, by increasing peak
/// (time strictly falling).
pub(crate) struct Front<'a> {
    points: Vec<Point<'a>>,
    links: Links<'a>,
}

impl<'a> Front<'a> {
    fn search(prepared: &Prepared<'a>, caps: Caps) -> Result<Front<'a>> {
        let chain = prepared.chain;
        let (mut points, links): (Vec<Point<'a>>, Links<'a>) = match &prepared.nodes {
            Some(nodes) => {
                let (front, links) = backward::search(chain.base, nodes, caps)?;
                let points = front
                    .into_iter()
                    .map(|s| {
                        let peak = crate::chain::add("", "the step's peak", chain.base, s.c)?;
                        Ok(Point {
                            peak: peak.max(prepared.update),
                            ticks: s.ticks,
                            plan: PlanOf::Linked(s.plan),
                        })
                    })
                    .collect::<Result<_>>()?;
                (points, links)
            }
            None => (
                forward::search(chain, caps)?
                    .into_iter()
                    .map(|(peak, ticks, plan)| Point {
                        peak,
                        ticks,
                        plan: PlanOf::Listed(plan),
                    })
                    .collect(),
                Links::default(),
            ),
        };
        points.retain(|p| p.peak <= caps.peak && p.ticks <= caps.ticks);
        // Sorted by peak, then time: each point kept when faster than every one before it.
        points.sort_by(|a, b| a.peak.cmp(&b.peak).then(a.ticks.cmp(&b.ticks)));
        let mut front: Vec<Point<'a>> = Vec::with_capacity(points.len());
        for p in points {
            if front.last().is_none_or(|l| p.ticks < l.ticks) {
                front.push(p);
            }
        }
        Ok(Front { points: front, links })
    }

    fn solution(&self, point: &Point<'a>) -> Solution<'a> {
        let plan = match &point.plan {
            PlanOf::Listed(plan) => plan.clone(),
            PlanOf::Linked(head) => self.links.plan(*head),
        };
        Solution {
            extra_ms: ChainModel::extra_ms(&plan),
            plan,
            peak: point.peak,
        }
    }

    /// The fastest plan whose peak is at most `budget` bytes (ties: the lower peak).
    pub(crate) fn least_time_within(&self, budget: u64) -> Option<Solution<'a>> {
        let last = self.points.partition_point(|p| p.peak <= budget).checked_sub(1)?;
        Some(self.solution(&self.points[last]))
    }

    /// The plan of least peak (ties: least time).
    fn least_peak(&self) -> Option<Solution<'a>> {
        self.points.first().map(|p| self.solution(p))
    }

    /// Every plan, by increasing peak.
    fn solutions(&self) -> Vec<Solution<'a>> {
        self.points.iter().map(|p| self.solution(p)).collect()
    }
}

/// The fastest plans within budgets asked one after another, each search capped in time as
/// well as in bytes: the front of plans within the budget and within a time cap holds the
/// fastest plan within the budget whenever that plan's time is within the cap, so the cap
/// starts at no time at all and doubles (from the least time any option adds) until it does,
/// or until it covers every plan's time. A fast plan under a generous budget is then found
/// without the front of every slower plan under it.
pub(crate) struct FastestWithin<'a> {
    prepared: Prepared<'a>,
    /// The least peak of any plan (no budget below it has a plan).
    least_peak: u64,
    /// Least time any option adds (the first nonzero cap), and more than any plan takes.
    step: Ticks,
    bound: Ticks,
    /// The last front searched, with its byte budget and time cap.
    front: Option<(u64, Ticks, Front<'a>)>,
}

impl<'a> FastestWithin<'a> {
    pub(crate) fn new(chain: &'a ChainModel) -> Result<Self> {
        let mut step = Ticks::MAX;
        let mut bound: Ticks = 0;
        fn visit(seg: &ChainSegment, step: &mut Ticks, bound: &mut Ticks) -> Result<()> {
            let ticks = bounds::option_ticks(seg)?;
            for &t in &ticks {
                if t > 0 {
                    *step = (*step).min(t);
                }
            }
            *bound = bound.saturating_add(ticks.into_iter().max().unwrap_or(0));
            Ok(())
        }
        fn walk(nodes: &[ChainNode], step: &mut Ticks, bound: &mut Ticks) -> Result<()> {
            for node in nodes {
                visit(node.segment(), step, bound)?;
                if let ChainNode::Splittable { parts, runs, .. } = node {
                    walk(parts, step, bound)?;
                    for run in runs {
                        visit(run, step, bound)?;
                    }
                }
            }
            Ok(())
        }
        walk(&chain.nodes, &mut step, &mut bound)?;
        let prepared = Prepared::new(chain)?;
        Ok(FastestWithin {
            least_peak: least_peak(&prepared)?,
            prepared,
            step,
            bound,
            front: None,
        })
    }

    /// The plan of least extra time whose predicted peak is at most `budget` bytes (ties:
    /// lower peak); `None` when no plan fits.
    pub(crate) fn least_time_within(&mut self, budget: u64) -> Result<Option<Solution<'a>>> {
        if budget < self.least_peak {
            return Ok(None);
        }
        let mut cap = 0;
        // The last front answers when it covers this budget (budgets asked one after another
        // only fall).
        if let Some((searched, searched_cap, front)) = &self.front
            && *searched >= budget
        {
            if let Some(s) = front.least_time_within(budget) {
                return Ok(Some(s));
            }
            if *searched_cap >= self.bound {
                return Ok(None);
            }
            cap = self.next_cap(*searched_cap);
        }
        loop {
            let caps = Caps {
                peak: budget,
                ticks: cap,
                first_only: false,
            };
            let front = Front::search(&self.prepared, caps)?;
            let found = front.least_time_within(budget);
            self.front = Some((budget, cap, front));
            if found.is_some() || cap >= self.bound {
                return Ok(found);
            }
            cap = self.next_cap(cap);
        }
    }

    /// The plan of least peak (ties: least time): the front within the least peak.
    pub(crate) fn min_peak(&self) -> Result<Solution<'a>> {
        let caps = Caps {
            peak: self.least_peak,
            ..Caps::NONE
        };
        Front::search(&self.prepared, caps)?.least_peak().ok_or_else(|| {
            crate::SearchError::Internal("no plan reaches the least peak the chain found".into())
        })
    }

    fn next_cap(&self, cap: Ticks) -> Ticks {
        cap.saturating_mul(2).max(self.step).min(self.bound)
    }
}

/// The plan of least extra time whose predicted peak is at most `budget` bytes (ties: lower
/// peak); `None` when no plan fits.
pub fn least_time_within(chain: &ChainModel, budget: u64) -> Result<Option<Solution<'_>>> {
    FastestWithin::new(chain)?.least_time_within(budget)
}

/// The least predicted peak of any plan, in bytes: the search keeping only the least `c`.
fn least_peak(prepared: &Prepared<'_>) -> Result<u64> {
    let caps = Caps {
        first_only: true,
        ..Caps::NONE
    };
    Front::search(prepared, caps)?
        .points
        .first()
        .map(|p| p.peak)
        .ok_or_else(|| crate::SearchError::Internal("the chain has no plan".into()))
}

/// The plan of least predicted peak (ties: least extra time): the least peak, then the front
/// capped at it.
pub fn min_peak(chain: &ChainModel) -> Result<Solution<'_>> {
    FastestWithin::new(chain)?.min_peak()
}

/// The plan of least predicted peak whose extra time is at most `max_extra_ms` (ties: least
/// time): the front capped at that time, its first point.
pub fn min_peak_within_time(chain: &ChainModel, max_extra_ms: f64) -> Result<Solution<'_>> {
    let ticks = ticks::of_limit(max_extra_ms).ok_or_else(|| {
        crate::SearchError::InvalidSetting(format!("a time limit is a number of ms >= 0, got {max_extra_ms}"))
    })?;
    let caps = Caps { ticks, ..Caps::NONE };
    Front::search(&Prepared::new(chain)?, caps)?
        .least_peak()
        .ok_or_else(|| {
            crate::SearchError::Internal(format!(
                "no plan takes at most {max_extra_ms} ms more than storing everything, which takes none"
            ))
        })
}

/// The plans on the Pareto front of (peak, extra time), by increasing peak.
pub fn pareto_front(chain: &ChainModel) -> Result<Vec<Solution<'_>>> {
    Ok(Front::search(&Prepared::new(chain)?, Caps::NONE)?.solutions())
}

#[cfg(test)]
mod tests;
