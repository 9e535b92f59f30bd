//! Building the [`ChainModel`] of a model: its sites, every option of every site measured
//! exactly (each distinct segment once, see `segment_key.rs`), and the loss after the
//! chain.

use crate::Result;
use crate::chain::{ChainModel, ChainNode, ChainSegment, SegmentOption};
use crate::measure::{Figures, measure_loss};
use crate::parallel::Request;
use crate::pricing::{SegmentPricing, extra_ms};
use crate::segment_key::Measurements;
use crate::sites::Site;
use memopt_checkpoint::{ChunkBoundaries, Model, Policy};
use memopt_compress::CompressorKind;
use memopt_profiler::{CostModel, Workload};

/// Which options the planners consider for each segment.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionSpace {
    /// Compressor of checkpointed inputs (applied to spike inputs only).
    pub compressor: CompressorKind,
    /// Time-chunk counts tried for segments that can run on part of the time steps (counts
    /// above T are skipped). Each count k also brings the fewest chunks whose longest chunk is
    /// as long as k's (see [`chunk_candidates`]): at T = 10, 8 chunks (longest 2 steps) bring
    /// 5 chunks of 2 steps, which keep 4 boundary states instead of 7.
    pub chunk_counts: Vec<usize>,
    /// Longest run of consecutive children considered as one segment (0: no runs).
    pub max_run: usize,
    /// Whether a stored segment may keep its convolution and linear layers' spike inputs
    /// bit-packed ([`Policy::StorePacked`]); offered only where that changes its figures.
    pub store_packed: bool,
    /// Whether the most time chunks a segment is offered are also offered with boundary states
    /// replayed instead of kept ([`ChunkBoundaries::Replayed`]: no boundary state held, at
    /// `k (k - 1) / 2` chunk forwards per backward pass). Only the largest count: replaying is
    /// for the least memory, where the most chunks win, and measuring every count replayed
    /// took the planner's Meta measurement of the VGG (T = 10) from 0.9 s to 3.9 s.
    pub replay_boundaries: bool,
}

impl Default for OptionSpace {
    fn default() -> Self {
        OptionSpace {
            compressor: CompressorKind::BitSpike,
            chunk_counts: vec![2, 4, 8],
            max_run: 6,
            store_packed: true,
            replay_boundaries: true,
        }
    }
}

/// The time-chunk counts tried at `t` time steps for the listed `counts`: every listed count
/// from 2 to `t`, and for each the fewest chunks with the same longest chunk,
/// `ceil(t / ceil(t / k))`; ascending, each once.
///
/// Why the second: a chunked segment keeps one neuron state per chunk boundary until its
/// backward reaches that chunk, and while its BatchNorm gradient-sums passes run, every
/// boundary's state and one chunk's recomputed tensors are live at once; the fewest chunks of
/// a given longest chunk keep the fewest boundaries at the same chunk size. The listed count
/// stays a candidate because with its more, shorter chunks the last chunks (whose backward
/// runs while most boundary states are still kept) are shorter, which can win where there is
/// no BatchNorm; the planner measures both and chooses.
pub fn chunk_candidates(counts: &[usize], t: usize) -> Vec<usize> {
    let mut out: Vec<usize> = counts
        .iter()
        .filter(|&&k| k > 1 && k <= t)
        .flat_map(|&k| {
            let longest = t.div_ceil(k);
            [k, t.div_ceil(longest)]
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Path of the pseudo-segment that stands for the loss after the chain.
pub const LOSS_PATH: &str = "(loss)";

fn option(policy: Policy, f: &Figures, extra_ms: f64) -> SegmentOption {
    SegmentOption {
        policy,
        forward_peak: f.forward_peak,
        kept: f.kept,
        backward_peak: f.backward_peak,
        extra_ms,
    }
}

/// The policies measured for `site` in a chain of `t` time steps, in the order [`segment`]
/// measures them: storing, checkpointing, time chunks where the site can run on part of the
/// time steps, and last [`Policy::StorePacked`] when the space offers it.
fn policies(site: &Site, t: usize, space: &OptionSpace) -> Vec<Policy> {
    let mut policies = vec![Policy::Store, Policy::checkpoint(space.compressor, 1)];
    if site.time_separable {
        let candidates = chunk_candidates(&space.chunk_counts, t);
        policies.extend(
            candidates
                .iter()
                .map(|&chunks| Policy::checkpoint(space.compressor, chunks)),
        );
        if space.replay_boundaries
            && let Some(&chunks) = candidates.last()
        {
            policies.push(Policy::Checkpoint {
                compressor: space.compressor,
                chunks,
                boundaries: ChunkBoundaries::Replayed,
            });
        }
    }
    if space.store_packed {
        policies.push(Policy::StorePacked);
    }
    policies
}

/// The runs of consecutive links of `site`'s chain ([`Site::chain`]) that are segments of
/// their own: `[start, end)`, at least two links and at most [`OptionSpace::max_run`], never
/// all of them.
fn runs(site: &Site, space: &OptionSpace) -> Vec<(usize, usize)> {
    let n = site.chain().len();
    let mut out = Vec::new();
    if site.runs_allowed {
        for start in 0..n {
            for end in start + 2..=n.min(start + space.max_run) {
                if (start, end) != (0, n) {
                    out.push((start, end));
                }
            }
        }
    }
    out
}

/// Every measurement [`chain_model`] asks for under `site` (`first`: its input is the batch),
/// in the order it asks: each segment's [`policies`], then its parts', then its runs'.
pub(crate) fn requests(site: &Site, first: bool, t: usize, space: &OptionSpace, out: &mut Vec<Request>) {
    for policy in policies(site, t, space) {
        out.push(Request {
            site: site.clone(),
            policy,
            first,
        });
    }
    for (i, part) in site.chain().iter().enumerate() {
        requests(part, first && i == 0, t, space, out);
    }
    for (start, end) in runs(site, space) {
        let run = site.run_of(start, end);
        for policy in policies(&run, t, space) {
            out.push(Request {
                site: run.clone(),
                policy,
                first: first && start == 0,
            });
        }
    }
}

fn segment(
    model: &Model,
    site: &Site,
    first: bool,
    space: &OptionSpace,
    pricing: &SegmentPricing<'_>,
    measurements: &mut Measurements<'_>,
) -> Result<ChainSegment> {
    let t = model.spec().time_steps;
    let mut options = Vec::new();
    let mut fixed = None;
    let cost = pricing.for_site(site);
    for p in policies(site, t, space) {
        let f = measurements.of(site, p, first)?;
        fixed.get_or_insert((f.states, f.param_grads));
        // Offered only where packing changes a figure of storing (a layer there takes spikes).
        if p == Policy::StorePacked
            && options.first().is_some_and(|o: &SegmentOption| {
                (o.forward_peak, o.kept, o.backward_peak) == (f.forward_peak, f.kept, f.backward_peak)
            })
        {
            continue;
        }
        options.push(option(p, &f, extra_ms(&cost, site, p)));
    }
    let (states, param_grads) = fixed.unwrap_or((0, 0));
    Ok(ChainSegment {
        path: site.path.clone(),
        children: site.run,
        options,
        states,
        param_grads,
    })
}

fn node(
    model: &Model,
    site: &Site,
    first: bool,
    space: &OptionSpace,
    pricing: &SegmentPricing<'_>,
    measurements: &mut Measurements<'_>,
) -> Result<ChainNode> {
    let whole = segment(model, site, first, space, pricing, measurements)?;
    if site.chain().is_empty() {
        return Ok(ChainNode::Segment(whole));
    }
    let parts = site
        .chain()
        .iter()
        .enumerate()
        .map(|(i, p)| node(model, p, first && i == 0, space, pricing, measurements))
        .collect::<Result<Vec<_>>>()?;
    let runs = runs(site, space)
        .into_iter()
        .map(|(start, end)| {
            segment(
                model,
                &site.run_of(start, end),
                first && start == 0,
                space,
                pricing,
                measurements,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ChainNode::Splittable { whole, parts, runs })
}

/// The chain model of `model` (built on Meta) for batches of `n`: the root's chain of parts
/// (or the root itself when its children do not form a chain), then the loss. `base` is what
/// the step holds throughout (parameters, buffers, optimizer state, batch), in bytes.
pub fn chain_model(
    model: &Model,
    root: &Site,
    n: usize,
    base: u64,
    space: &OptionSpace,
    cost: &CostModel,
) -> Result<ChainModel> {
    build(model, root, n, base, space, cost, &mut Measurements::new(model))
}

/// [`chain_model`] with the distinct segments measured in advance on up to `threads` threads
/// (`model` is `workload`'s model on its Meta device; each further thread builds its own
/// copy): the same chain model, figure for figure, as measuring on this thread.
#[allow(clippy::too_many_arguments)]
pub fn chain_model_on_threads(
    workload: &Workload,
    model: &Model,
    root: &Site,
    n: usize,
    base: u64,
    space: &OptionSpace,
    cost: &CostModel,
    threads: usize,
) -> Result<ChainModel> {
    let mut measurements = Measurements::new(model);
    let mut wanted = Vec::new();
    requests(root, true, model.spec().time_steps, space, &mut wanted);
    measurements.prefetch(workload, wanted, threads)?;
    build(model, root, n, base, space, cost, &mut measurements)
}

/// [`chain_model`] with the measurements given.
fn build(
    model: &Model,
    root: &Site,
    n: usize,
    base: u64,
    space: &OptionSpace,
    cost: &CostModel,
    measurements: &mut Measurements<'_>,
) -> Result<ChainModel> {
    let pricing = SegmentPricing::new(cost);
    let mut nodes = vec![node(model, root, true, space, &pricing, measurements)?];
    let loss = measure_loss(root, n, model.device())?;
    nodes.push(ChainNode::Segment(ChainSegment {
        path: LOSS_PATH.into(),
        children: None,
        options: vec![option(Policy::Store, &loss, 0.0)],
        states: loss.states,
        param_grads: 0,
    }));
    Ok(ChainModel { base, nodes })
}

#[cfg(test)]
mod tests;
