//! Building the [`ChainModel`] of a model: its sites, every option of every site measured
//! exactly (each distinct segment once, see `segment_key.rs`), and the loss after the
//! chain.

use crate::Result;
use crate::chain::{ChainModel, ChainNode, ChainSegment, SegmentOption};
use crate::measure::{Figures, measure_loss};
use crate::pricing::{SegmentPricing, extra_ms};
use crate::segment_key::Measurements;
use crate::sites::Site;
use memopt_checkpoint::{Model, Policy};
use memopt_compress::CompressorKind;
use memopt_profiler::CostModel;

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
}

impl Default for OptionSpace {
    fn default() -> Self {
        OptionSpace {
            compressor: CompressorKind::BitSpike,
            chunk_counts: vec![2, 4, 8],
            max_run: 6,
            store_packed: true,
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

fn segment(
    model: &Model,
    site: &Site,
    first: bool,
    space: &OptionSpace,
    pricing: &SegmentPricing<'_>,
    measurements: &mut Measurements<'_>,
) -> Result<ChainSegment> {
    let t = model.spec().time_steps;
    let mut policies = vec![
        Policy::Store,
        Policy::Checkpoint {
            compressor: space.compressor,
            chunks: 1,
        },
    ];
    if site.time_separable {
        policies.extend(
            chunk_candidates(&space.chunk_counts, t)
                .into_iter()
                .map(|chunks| Policy::Checkpoint {
                    compressor: space.compressor,
                    chunks,
                }),
        );
    }
    let mut options = Vec::with_capacity(policies.len());
    let mut fixed = None;
    let cost = pricing.for_site(site);
    for p in policies {
        let f = measurements.of(site, p, first)?;
        fixed.get_or_insert((f.states, f.param_grads));
        options.push(option(p, &f, extra_ms(&cost, site, p)));
    }
    // Offered only where packing changes a figure of storing (a layer there takes spikes).
    let store = options.first().map(|o| (o.forward_peak, o.kept, o.backward_peak));
    if space.store_packed {
        let f = measurements.of(site, Policy::StorePacked, first)?;
        if store != Some((f.forward_peak, f.kept, f.backward_peak)) {
            options.push(option(
                Policy::StorePacked,
                &f,
                extra_ms(&cost, site, Policy::StorePacked),
            ));
        }
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
    if site.parts.is_empty() {
        return Ok(ChainNode::Segment(whole));
    }
    let parts = site
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| node(model, p, first && i == 0, space, pricing, measurements))
        .collect::<Result<Vec<_>>>()?;
    let n = site.parts.len();
    let mut runs = Vec::new();
    if site.runs_allowed {
        for start in 0..n {
            for end in start + 2..=n.min(start + space.max_run) {
                if (start, end) != (0, n) {
                    runs.push(segment(
                        model,
                        &site.run_of(start, end),
                        first && start == 0,
                        space,
                        pricing,
                        measurements,
                    )?);
                }
            }
        }
    }
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
