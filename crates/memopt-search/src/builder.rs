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
use memopt_checkpoint::{BatchNormInputs, ChunkBoundaries, Model, Plan, PlanEntry, Policy};
use memopt_compress::CompressorKind;
use memopt_profiler::{CostModel, Workload};
use pieces::{PartRun, Piece, part_runs, piece_site, pieces, rest_runs, rest_site};

/// Which options the planners consider for each segment.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionSpace {
    /// Compressor of checkpointed inputs (applied to spike inputs only).
    pub compressor: CompressorKind,
    /// Time-chunk counts tried for segments that can run on part of the time steps and hold at
    /// most [`MAX_CHUNKED_BATCH_NORMS`] training BatchNorms (a count
    /// above T stands for T: one time step per chunk). Each count k also brings the fewest
    /// chunks whose longest chunk is as long as k's (see [`chunk_candidates`]): at T = 10,
    /// 8 chunks (longest 2 steps) bring 5 chunks of 2 steps, which keep 4 boundary states
    /// instead of 7, and 16 stands for 10 chunks of one step.
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
    /// Whether chunk counts of 3 or more are also offered keeping the boundary states of every
    /// m-th chunk only ([`ChunkBoundaries::KeptEvery`], m = [`sparse_interval`]: about `k / m`
    /// states held, and before each chunk between them the chunks since the last kept one
    /// replayed, about `k (m - 1) / 2` chunk forwards per backward pass instead of
    /// `k (k - 1) / 2`), for each count that is the fewest chunks of its longest chunk (at
    /// T = 10: 4 and 5 chunks keeping every 2nd, 10 chunks every 3rd), not offloaded. On the VGG
    /// at N = 32, T = 10, block 1's segment in 5 chunks keeping every 2nd holds 2 boundary
    /// states instead of 4 through the recomputation of block 3: 4x at +22.8% instead of
    /// +52.7% predicted.
    pub sparse_boundaries: bool,
    /// Whether chunked segments with a training BatchNorm are also offered keeping that
    /// BatchNorm's inputs from its statistics pass for the forward's later passes
    /// ([`BatchNormInputs::Kept`]: the layers before it run once in forward instead of twice,
    /// at the price of holding their output, one full-length tensor, between the passes), where
    /// only stateless layers in a chain come before it.
    pub keep_batch_norm_inputs: bool,
    /// Whether a link whose own chain starts with a pooling (a VGG block's average pool) is
    /// split into that pooling and the rest, so that a run of the links before it can end
    /// after the pooling ([`memopt_checkpoint::PlanEntry::into_next`]: its segment then
    /// receives the pooled gradient). The split chain cannot hold a run of the block's own
    /// links that starts at the pooling, so a planning session builds the chain both ways and
    /// plans on both ([`crate::PlanningSession`]).
    pub split_poolings: bool,
    /// Whether a checkpointed segment keeps a pooled-spike input (an average pooling of spikes,
    /// [`memopt_core::KnownValues::PooledSpikes`]) as spike counts, one byte per value (its
    /// recomputation's convolution or linear layer then keeps the counts for its backward).
    /// Without, segments whose input is pooled spikes are checkpointed with the null
    /// compressor, keeping it whole. The counts' small payloads can
    /// fragment the caching allocator's segments, so that a plan without them can fit a
    /// reserved budget faster (on the VGG at N = 32 for the CUDA target, within 40% of the
    /// baseline's reserved peak: +8.1% predicted instead of +54.3%), so a planning session
    /// builds its chain models both ways ([`crate::PlanningSession::chains`]).
    pub spike_counts: bool,
    /// Whether every checkpoint option is also offered offloaded ([`Policy::Offload`]: the
    /// saved input, per time chunk, in host memory between the segment's forward and its
    /// backward). Only where host memory is separate from the model's device (a GPU, or Meta
    /// of a GPU: [`memopt_core::Device::has_separate_host`]); elsewhere offloading frees nothing
    /// and the option is not measured.
    pub offload: bool,
    /// Whether the plans update each parameter in backward, as soon as its gradient is final
    /// ([`memopt_checkpoint::Plan::update_in_backward`]): every segment's gradients are freed
    /// in its own backward instead of waiting for the update after backward, so no segment's
    /// backward holds the gradients of the segments after it. Costs no time; the step returns
    /// no gradients.
    pub update_in_backward: bool,
}

impl Default for OptionSpace {
    fn default() -> Self {
        OptionSpace {
            compressor: CompressorKind::BitSpike,
            chunk_counts: vec![2, 4, 8, 16],
            max_run: 6,
            store_packed: true,
            replay_boundaries: true,
            sparse_boundaries: true,
            keep_batch_norm_inputs: true,
            split_poolings: true,
            spike_counts: true,
            offload: true,
            update_in_backward: true,
        }
    }
}

/// The time-chunk counts tried at `t` time steps for the listed `counts`: every listed count
/// from 2 on, `t` for a count above `t` (one time step per chunk: at T = 10 the least memory
/// of the CIFAR10-DVS VGG at N = 32 falls from 669.8 to 509.7 MiB with it), and for each the
/// fewest chunks with the same longest chunk, `ceil(t / ceil(t / k))`; ascending, each once.
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
        .map(|&k| k.min(t))
        .filter(|&k| k > 1)
        .flat_map(|k| [k, fewest_chunks_as_long(t, k)])
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The fewest chunks of `t` time steps whose longest chunk is as long as with `k` chunks:
/// `ceil(t / ceil(t / k))` (`k` at least 1).
fn fewest_chunks_as_long(t: usize, k: usize) -> usize {
    t.div_ceil(t.div_ceil(k))
}

/// Every how many chunks `k` chunks keep their boundary states when offered sparse
/// boundaries ([`OptionSpace::sparse_boundaries`]): `round(sqrt(k))`, at least 2 (4 and 5 chunks: 2; 10 chunks: 3), which balances
/// the `k / m` states kept against the about `k (m - 1) / 2` chunk forwards replayed per pass.
pub fn sparse_interval(chunks: usize) -> usize {
    ((chunks as f64).sqrt().round() as usize).max(2)
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
/// time steps, each of those offloaded when the space offers it ([`OptionSpace::offload`],
/// already limited to devices with separate host memory by [`offered`]), and last
/// [`Policy::StorePacked`] when the space offers it.
fn policies(model: &Model, site: &Site, space: &OptionSpace) -> Vec<Policy> {
    let mut policies = policies_of(site, model.spec().time_steps, space);
    // Each chunked policy on the device that keeps boundary states again keeping its first
    // BatchNorm's inputs, where the segment can. Not with replayed boundaries, which are for the
    // least memory (a full-length tensor held between the forward passes works against it),
    // nor offloaded (the kept inputs stay on the device): each would add measurements for
    // options that rarely pay, and the CUDA target's planning of the VGG took 1.09 s with them.
    if space.keep_batch_norm_inputs && keeps_batch_norm_inputs(model, site) {
        let kept: Vec<Policy> = policies
            .iter()
            .filter(|p| p.chunks() > 1 && !p.offloads() && p.boundaries() != ChunkBoundaries::Replayed)
            .map(|p| p.with_batch_norm_inputs(BatchNormInputs::Kept))
            .collect();
        let at = policies.len() - usize::from(policies.last() == Some(&Policy::StorePacked));
        policies.splice(at..at, kept);
    }
    policies
}

/// Whether a chunked run of `site` may keep its BatchNorm inputs: the model accepts that plan
/// (a training BatchNorm inside, only stateless layers and chains before the first).
fn keeps_batch_norm_inputs(model: &Model, site: &Site) -> bool {
    model.spec().time_steps >= 2
        && model
            .check_plan(&Plan {
                update_in_backward: false,
                version: memopt_checkpoint::PLAN_VERSION,
                entries: vec![PlanEntry {
                    path: site.path.clone(),
                    children: site.run,
                    into_next: site.into_next,
                    policy: Policy::checkpoint(CompressorKind::BitSpike, 2)
                        .with_batch_norm_inputs(BatchNormInputs::Kept),
                }],
            })
            .is_ok()
}

/// The most training BatchNorms a segment is offered time chunks with. A chunked segment's
/// forward runs one statistics pass per BatchNorm inside ([`Site::batch_norms`]), so measuring
/// it costs its length times its BatchNorms: offered the time chunks, the whole chain of a
/// custom model of n conv-BatchNorm-LIF blocks took O(n^2) Meta passes (49 s at 2,000 layers).
/// Capped, each chunked segment costs at most this many passes of its length. 32 is above
/// every zoo model's BatchNorms (the ResNet-18s: 20 in all), so none of their plans changes. A
/// segment with more is still offered storing and checkpointing whole, and its links and runs
/// (at most [`OptionSpace::max_run`] links) keep the time chunks when they hold fewer.
pub const MAX_CHUNKED_BATCH_NORMS: usize = 32;

/// The policies offered to `site` before kept BatchNorm inputs (see [`policies`]).
fn policies_of(site: &Site, t: usize, space: &OptionSpace) -> Vec<Policy> {
    let compressor = if !space.spike_counts && site.inputs.iter().any(|x| x.pooled_spike_window.is_some()) {
        CompressorKind::Null
    } else {
        space.compressor
    };
    let mut policies = vec![Policy::Store, Policy::checkpoint(compressor, 1)];
    if site.time_separable && site.batch_norms <= MAX_CHUNKED_BATCH_NORMS {
        let candidates = chunk_candidates(&space.chunk_counts, t);
        policies.extend(
            candidates
                .iter()
                .map(|&chunks| Policy::checkpoint(compressor, chunks)),
        );
        if space.replay_boundaries
            && let Some(&chunks) = candidates.last()
        {
            policies.push(Policy::Checkpoint {
                compressor,
                chunks,
                boundaries: ChunkBoundaries::Replayed,
                batch_norm_inputs: BatchNormInputs::Recomputed,
            });
        }
        if space.sparse_boundaries {
            // Only the fewest chunks of each longest chunk: more chunks of the same length
            // keep more boundaries, which is what sparse boundaries thin out.
            policies.extend(
                candidates
                    .iter()
                    .filter(|&&k| k >= 3 && fewest_chunks_as_long(t, k) == k)
                    .map(|&chunks| Policy::Checkpoint {
                        compressor,
                        chunks,
                        boundaries: ChunkBoundaries::KeptEvery(sparse_interval(chunks)),
                        batch_norm_inputs: BatchNormInputs::Recomputed,
                    }),
            );
        }
    }
    if space.offload {
        // Offloaded boundary states leave the device anyway: sparse boundaries are offered
        // kept on the device only.
        let offloaded: Vec<Policy> = policies[1..]
            .iter()
            .filter(|p| !matches!(p.boundaries(), ChunkBoundaries::KeptEvery(_)))
            .map(|p| Policy::Offload {
                compressor,
                chunks: p.chunks(),
                boundaries: p.boundaries(),
                batch_norm_inputs: BatchNormInputs::Recomputed,
            })
            .collect();
        policies.extend(offloaded);
    }
    if space.store_packed {
        policies.push(Policy::StorePacked);
    }
    policies
}

/// `space` as offered on `device`: no offload options where host memory is the device's own
/// (the CPU and Meta of the CPU), where they would free nothing.
fn offered(space: &OptionSpace, device: memopt_core::Device) -> OptionSpace {
    OptionSpace {
        offload: space.offload && device.has_separate_host(),
        ..space.clone()
    }
}

/// Whether some segment under `root` takes or holds pooled spikes (so that
/// [`OptionSpace::spike_counts`] changes its options).
fn has_pooled_spikes(root: &Site) -> bool {
    root.walk()
        .into_iter()
        .any(|s| s.inputs.iter().any(|x| x.pooled_spike_window.is_some()))
}

/// Every measurement [`chain_model`] asks for under `site` (`first`: its input is the batch),
/// in the order it asks: each segment's [`policies`], then its parts', then its runs'.
pub(crate) fn requests(site: &Site, first: bool, model: &Model, space: &OptionSpace, out: &mut Vec<Request>) {
    let ask = |s: &Site, first: bool, out: &mut Vec<Request>| {
        for policy in policies(model, s, space) {
            out.push(Request {
                site: s.clone(),
                policy,
                first,
                update_in_backward: space.update_in_backward,
            });
        }
    };
    ask(site, first, out);
    let pieces = pieces(site, space);
    for (i, &piece) in pieces.iter().enumerate() {
        let first = first && i == 0;
        match piece {
            Piece::Link(c) => requests(&site.chain()[c], first, model, space, out),
            Piece::Head(_) => requests(&piece_site(site, piece), first, model, space, out),
            Piece::Rest(c) => {
                ask(&rest_site(site, c), false, out);
                for part in &site.chain()[c].chain()[1..] {
                    requests(part, false, model, space, out);
                }
                for run in rest_runs(site, c, space) {
                    ask(&run.site, false, out);
                }
            }
        }
    }
    for run in part_runs(site, &pieces, space) {
        ask(&run.site, first && run.starts_chain(), out);
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
    let mut options = Vec::new();
    let mut fixed = None;
    let cost = pricing.for_site(site);
    for p in policies(model, site, space) {
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
        into_next: site.into_next,
        span: None,
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
    let pieces = pieces(site, space);
    let mut parts = Vec::with_capacity(pieces.len());
    for (i, &piece) in pieces.iter().enumerate() {
        let first = first && i == 0;
        parts.push(match piece {
            Piece::Link(c) => node(model, &site.chain()[c], first, space, pricing, measurements)?,
            Piece::Head(_) => node(
                model,
                &piece_site(site, piece),
                first,
                space,
                pricing,
                measurements,
            )?,
            Piece::Rest(c) => ChainNode::Splittable {
                whole: segment(model, &rest_site(site, c), false, space, pricing, measurements)?,
                parts: site.chain()[c].chain()[1..]
                    .iter()
                    .map(|p| node(model, p, false, space, pricing, measurements))
                    .collect::<Result<Vec<_>>>()?,
                runs: rest_runs(site, c, space)
                    .into_iter()
                    .map(|r| run_segment(model, r, false, space, pricing, measurements))
                    .collect::<Result<Vec<_>>>()?,
            },
        });
    }
    let runs = part_runs(site, &pieces, space)
        .into_iter()
        .map(|r| {
            let first = first && r.starts_chain();
            run_segment(model, r, first, space, pricing, measurements)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ChainNode::Splittable { whole, parts, runs })
}

/// The segment of a run of parts, with the parts it covers when named otherwise.
fn run_segment(
    model: &Model,
    run: PartRun,
    first: bool,
    space: &OptionSpace,
    pricing: &SegmentPricing<'_>,
    measurements: &mut Measurements<'_>,
) -> Result<ChainSegment> {
    let mut seg = segment(model, &run.site, first, space, pricing, measurements)?;
    seg.span = run.span;
    Ok(seg)
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
    let space = offered(space, model.device());
    build(
        model,
        root,
        n,
        base,
        &space,
        cost,
        &mut Measurements::new(model, space.update_in_backward),
    )
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
    let space = offered(space, model.device());
    let mut measurements = measured_ahead(workload, model, root, &[&space], threads)?;
    build(model, root, n, base, &space, cost, &mut measurements)
}

/// The measurements every chain model of `spaces` asks for under `root`, made in advance on up
/// to `threads` threads (each distinct segment once).
fn measured_ahead<'m>(
    workload: &Workload,
    model: &'m Model,
    root: &Site,
    spaces: &[&OptionSpace],
    threads: usize,
) -> Result<Measurements<'m>> {
    let update_in_backward = spaces.first().is_some_and(|s| s.update_in_backward);
    let mut measurements = Measurements::new(model, update_in_backward);
    let mut wanted = Vec::new();
    for space in spaces {
        requests(root, true, model, space, &mut wanted);
    }
    measurements.prefetch(workload, wanted, threads)?;
    Ok(measurements)
}

/// [`chain_model_on_threads`] with `space`, then the chain models of its variants, all
/// measured together (each distinct segment once): when `space` splits poolings
/// ([`OptionSpace::split_poolings`]) and the model has a link to split, the chain model
/// without that split; when it keeps pooled spikes as counts ([`OptionSpace::spike_counts`])
/// and the model has pooled spikes, each of those without counts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn chain_models_on_threads(
    workload: &Workload,
    model: &Model,
    root: &Site,
    n: usize,
    base: u64,
    space: &OptionSpace,
    cost: &CostModel,
    threads: usize,
) -> Result<Vec<ChainModel>> {
    let space = &offered(space, model.device());
    let mut spaces = vec![space.clone()];
    if space.split_poolings && splits_a_pooling(root, space) {
        spaces.push(OptionSpace {
            split_poolings: false,
            ..space.clone()
        });
    }
    // Only a binary compressor keeps pooled spikes as counts (`CompressorKind::keeping`).
    if space.spike_counts && space.compressor.requires_binary() && has_pooled_spikes(root) {
        let without: Vec<OptionSpace> = spaces
            .iter()
            .map(|s| OptionSpace {
                spike_counts: false,
                ..s.clone()
            })
            .collect();
        spaces.extend(without);
    }
    let refs: Vec<&OptionSpace> = spaces.iter().collect();
    let mut measurements = measured_ahead(workload, model, root, &refs, threads)?;
    spaces
        .iter()
        .map(|s| build(model, root, n, base, s, cost, &mut measurements))
        .collect()
}

/// Whether some container under `root` splits a link at its pooling.
fn splits_a_pooling(root: &Site, space: &OptionSpace) -> bool {
    root.walk()
        .into_iter()
        .any(|s| pieces(s, space).iter().any(|p| matches!(p, Piece::Head(_))))
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
        into_next: 0,
        span: None,
        options: vec![option(Policy::Store, &loss, 0.0)],
        states: loss.states,
        param_grads: 0,
    }));
    Ok(ChainModel { base, nodes })
}

mod pieces;
#[cfg(test)]
mod tests;
