//! The checkpoint node: forward without recording, keeping only the (compressed) inputs, the
//! RNG state and the neuron states the segment starts from; backward restores them, recomputes
//! with recording, backpropagates and frees — chunk by chunk in reverse when the time dimension
//! is split.

use super::chunk_passes::{self, Carry, ChunkData, ChunkSave, Pass, Recompute};
use super::saved_input::SavedInput;
use super::saved_state::SavedState;
use super::segment::Segment;
use super::{BatchNormInputs, ChunkBoundaries, Policy};
use crate::Forward;
use crate::autograd::{BackwardGrads, BackwardOp, Record, Var, VarId};
use crate::context::{Cx, Enter, KeptPass};
use crate::{CheckpointError, Result};
use memopt_core::kernels::BatchNormStats;
use memopt_core::{MemoryKind, ModulePath, RngState, Tensor, kernels};
use std::ops::Range;

struct CheckpointBackward<'m> {
    segment: Segment<'m>,
    /// Scope the segment runs in (the module's path, or its container's for a child range).
    path: ModulePath,
    /// Path prefixes of the neuron states the segment carries.
    state_prefixes: Vec<ModulePath>,
    chunks: Vec<ChunkSave>,
    spans: Vec<Range<usize>>,
    /// Whether each input wants a gradient.
    input_needs: Vec<bool>,
    /// Paths of the states the segment started from (node inputs after the regular inputs).
    entry_states: Vec<ModulePath>,
    /// Paths of the states the segment ended with (node outputs after the regular outputs).
    final_states: Vec<ModulePath>,
    /// Number of regular outputs.
    n_out: usize,
    /// Whether the forward ran where layers keep spike inputs packed (the recomputation does
    /// too).
    packs_saved_spikes: bool,
    /// At which chunks the forward saved the starting states ([`ChunkBoundaries::Kept`]
    /// without chunks); backward rebuilds the others by replaying chunks.
    boundaries: ChunkBoundaries,
    /// The training BatchNorms whose whole-batch statistics this chunked segment computed, in
    /// forward order (`chunk_passes.rs`).
    batch_norms: Vec<(ModulePath, BatchNormStats)>,
}

/// The time spans of the chunks: `[0..T]` for one chunk; otherwise k nearly equal spans, the
/// longer ones first (`[2, 1, 1]` for T = 4, k = 3).
pub fn time_spans(t: usize, chunks: usize) -> Vec<Range<usize>> {
    let (base, rem) = (t / chunks, t % chunks);
    let mut start = 0;
    (0..chunks)
        .map(|i| {
            let len = base + usize::from(i < rem);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

fn module_error(path: &str, segment: &Segment<'_>, message: String) -> CheckpointError {
    CheckpointError::Module {
        path: path.to_string(),
        module: segment.type_name(),
        message,
    }
}

/// Validates a chunked call and returns its spans.
fn chunk_spans(
    cx: &Cx<'_>,
    path: &str,
    segment: &Segment<'_>,
    inputs: &[Var],
    chunks: usize,
) -> Result<Vec<Range<usize>>> {
    if chunks <= 1 {
        // One span covering whatever the inputs are (they need not be time-major).
        let t = inputs
            .first()
            .and_then(|v| v.dims().first().copied())
            .unwrap_or(0);
        return Ok(time_spans(t, 1));
    }
    let Some(first) = inputs.first() else {
        return Err(module_error(
            path,
            segment,
            "a segment in time chunks needs at least one input".into(),
        ));
    };
    let t = first.dims().first().copied().unwrap_or(0);
    if t == 0 || first.dims().is_empty() {
        return Err(module_error(
            path,
            segment,
            format!(
                "a segment in time chunks needs inputs of shape [T, ...] with T >= 1, got {}",
                first.shape()
            ),
        ));
    }
    if let Some(v) = inputs.iter().find(|v| v.dims().first() != Some(&t)) {
        return Err(module_error(
            path,
            segment,
            format!(
                "all inputs of a chunked segment need the same T = {t}; got an input of shape {}",
                v.shape()
            ),
        ));
    }
    if chunks > t && !cx.in_time_chunk() {
        return Err(module_error(
            path,
            segment,
            format!("{chunks} chunks exceed the {t} time steps (valid: 1..={t})"),
        ));
    }
    if let Some((who, why)) = segment.time_coupling(path, cx.is_training()) {
        return Err(module_error(
            path,
            segment,
            format!("cannot chunk over time: {who}: {why}"),
        ));
    }
    // Inside a parent's time chunk, a chunk shorter than `chunks` splits into single steps.
    Ok(time_spans(t, chunks.min(t)))
}

/// Runs `segment` under a checkpoint or offload policy, in the scope `path`. Called by
/// [`Cx::call_here`] and [`Cx::call_children`] while recording.
pub(crate) fn forward<'m>(
    cx: &mut Cx<'m>,
    path: ModulePath,
    segment: Segment<'m>,
    inputs: Vec<Var>,
    policy: Policy,
) -> Forward<Vec<Var>> {
    let compressor = match policy {
        Policy::Checkpoint { compressor, .. } | Policy::Offload { compressor, .. } => compressor,
        Policy::Store => return segment.forward(cx, inputs),
        Policy::StorePacked => return segment.forward(&mut cx.enter(Enter::PackedSaves(true)), inputs),
    };
    if cx.skipping_to_batch_norm() {
        return Err(module_error(
            &path,
            &segment,
            "it is recomputed inside a time-chunked segment that keeps its BatchNorm inputs, before that \
             segment's first BatchNorm, which its later passes skip to; drop the enclosing segment's \
             \"batch_norm_inputs\" or this entry"
                .into(),
        )
        .into());
    }
    let (chunks, boundaries, offload) = (policy.chunks(), policy.boundaries(), policy.offloads());
    let spans = chunk_spans(cx, &path, &segment, &inputs, chunks)?;
    let state_prefixes = segment.state_prefixes(&path);
    let rng_entry = cx.rng().state();
    let entry = cx.states().under_any(&state_prefixes);
    let host = offload.then(|| cx.host_device());

    let mut node_inputs: Vec<Option<VarId>> = inputs.iter().map(Var::id).collect();
    let input_needs: Vec<bool> = inputs.iter().map(Var::requires_grad).collect();
    let packs_saved_spikes = cx.packs_saved_spikes();
    // The segment's forward gets the inputs themselves: once their (compressed) copies are
    // saved, the segment's own ops are their last readers and free them when done.
    let inputs: Vec<Var> = inputs.into_iter().map(Var::into_constant).collect();
    let paused = cx.pause_tape();
    let chunked = spans.len() > 1;
    let boundaries = if chunked {
        boundaries
    } else {
        ChunkBoundaries::Kept
    };
    // A segment nested in one that keeps its BatchNorm inputs runs with its own (the
    // enclosing one's are back once it is done).
    let ran = run_chunks(
        &mut cx.enter(Enter::SegmentForward { chunked }),
        (&segment, &path),
        &state_prefixes,
        inputs,
        (&spans, policy.batch_norm_inputs()),
        rng_entry,
        (compressor, boundaries),
        host,
    );
    let params = cx.resume_tape(paused);
    let (saves, outputs, batch_norms) = ran?;

    let finals = cx.states().under_any(&state_prefixes);
    let n_out = outputs.len();
    node_inputs.extend(entry.iter().map(|(_, v)| v.id()));
    let mut node_outputs = outputs;
    for (_, v) in &finals {
        node_outputs.push(v.tensor()?.into_owned());
    }
    let op = CheckpointBackward {
        segment,
        path: path.clone(),
        state_prefixes,
        chunks: saves,
        spans,
        input_needs,
        packs_saved_spikes,
        boundaries,
        entry_states: entry.into_iter().map(|(p, _)| p).collect(),
        final_states: finals.iter().map(|(p, _)| p.clone()).collect(),
        n_out,
        batch_norms,
    };
    let mut vars = cx.record(
        Record::erased(Box::new(op), node_inputs).reading(params),
        node_outputs,
    );
    let state_vars = vars.split_off(n_out);
    for ((p, _), v) in finals.into_iter().zip(state_vars) {
        cx.states_mut().set(p, v);
    }
    Ok(vars)
}

type ChunkRun = (Vec<ChunkSave>, Vec<Tensor>, Vec<(ModulePath, BatchNormStats)>);

/// The forward of every chunk without recording; chunk outputs are written into full-length
/// outputs allocated after the first chunk. A chunked segment with training BatchNorms first
/// runs their statistics passes (`chunk_passes.rs`), whose statistics it returns (and keeps
/// for backward). Without chunks the segment's forward receives `inputs` themselves (after
/// their copies for backward are saved), so that they are freed as soon as the segment has
/// read them; with chunks they live until the last chunk has run.
#[allow(clippy::too_many_arguments)]
fn run_chunks<'m>(
    cx: &mut Cx<'m>,
    (segment, path): (&Segment<'m>, &ModulePath),
    state_prefixes: &[ModulePath],
    inputs: Vec<Var>,
    (spans, batch_norm_inputs): (&[Range<usize>], BatchNormInputs),
    rng_entry: RngState,
    saving: (memopt_compress::CompressorKind, ChunkBoundaries),
    host: Option<memopt_core::Device>,
) -> Forward<ChunkRun> {
    let keep_inputs = batch_norm_inputs == BatchNormInputs::Kept;
    // The statistics the passes give are taken back when `run` is dropped.
    let mut run = cx.enter(Enter::Statistics);
    let batch_norms = chunk_passes::statistics_passes(
        &mut run,
        (segment, path),
        state_prefixes,
        &inputs,
        (spans, keep_inputs),
        rng_entry,
    )?;
    if let Some(kept) = run.kept_inputs_mut() {
        kept.begin_pass(KeptPass::Taking);
    }
    let paths = || batch_norms.iter().map(|(p, _)| p);
    run.batch_stats_mut().reset_counts(paths());
    let ran = chunk_outputs(
        &mut run,
        segment,
        state_prefixes,
        inputs,
        spans,
        rng_entry,
        saving,
        host,
    );
    // Whatever the last pass left of the kept inputs goes now.
    run.set_kept_inputs(None);
    let checked = ran.and_then(|r| Ok(run.batch_stats_mut().check_counts(paths()).map(|()| r)?));
    drop(run);
    let (saves, outputs) = checked?;
    // The statistics stay with the node for backward.
    for (_, stats) in &batch_norms {
        cx.save(&stats.mean);
        cx.save(&stats.invstd);
    }
    Ok((saves, outputs, batch_norms))
}

/// The forward of every chunk (the last pass when there are statistics passes). `saving`: the
/// compressor of saved inputs, and at which chunks the states they start from are saved
/// ([`ChunkBoundaries::keeps_state_at`]; backward replays to rebuild the others).
#[allow(clippy::too_many_arguments)]
fn chunk_outputs<'m>(
    cx: &mut Cx<'m>,
    segment: &Segment<'m>,
    state_prefixes: &[ModulePath],
    inputs: Vec<Var>,
    spans: &[Range<usize>],
    rng_entry: RngState,
    (compressor, boundaries): (memopt_compress::CompressorKind, ChunkBoundaries),
    host: Option<memopt_core::Device>,
) -> Forward<(Vec<ChunkSave>, Vec<Tensor>)> {
    let chunked = spans.len() > 1;
    let mut saves = Vec::with_capacity(spans.len());
    let mut outputs: Vec<Tensor> = Vec::new();
    let mut whole = Some(inputs);
    for (i, span) in spans.iter().enumerate() {
        if chunked {
            // Every chunk replays the same random stream: dropout masks are shared over time.
            cx.rng().set_state(rng_entry);
        }
        let rng = cx.rng().state();
        let xs: Vec<Var> = match whole.as_ref() {
            Some(inputs) if chunked => inputs
                .iter()
                .map(|v| v.narrow0(span.start, span.len()))
                .collect::<Result<_>>()?,
            _ => whole.take().unwrap_or_default(),
        };
        if let Some(kept) = cx.kept_inputs_mut() {
            kept.begin_chunk(i);
        }
        let states = if !boundaries.keeps_state_at(i) {
            Vec::new()
        } else {
            cx.states()
                .under_any(state_prefixes)
                .into_iter()
                .map(|(p, v)| Ok((p, SavedState::save(&*v.tensor()?, host)?)))
                .collect::<Result<Vec<_>>>()?
        };
        let saved = xs
            .iter()
            .map(|x| SavedInput::save(x, compressor, host))
            .collect::<Result<Vec<_>>>()?;
        // Later chunks start from the states this one leaves; the last one's are read only
        // where an enclosing chunk or the caller reads them.
        let followed = i + 1 < spans.len();
        let ys = segment.forward(&mut cx.enter(Enter::Chunk { followed }), xs)?;
        saves.push(ChunkSave {
            inputs: saved,
            states,
            rng,
        });
        if !chunked {
            outputs = ys.into_iter().map(Var::into_tensor).collect::<Result<_>>()?;
            continue;
        }
        if outputs.is_empty() {
            let t: usize = spans.iter().map(|s| s.len()).sum();
            for y in &ys {
                let full = Tensor::zeros(
                    y.shape().with_dim0(t),
                    y.dtype(),
                    y.device(),
                    MemoryKind::Activation,
                )?;
                outputs.push(full.with_known_values(y.known_values()));
            }
        }
        for (full, y) in outputs.iter().zip(&ys) {
            kernels::assign(&full.narrow0(span.start, span.len())?, &*y.tensor()?)?;
        }
    }
    Ok((saves, outputs))
}

impl<'m> BackwardOp<'m, Cx<'m>> for CheckpointBackward<'m> {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn backward(self: Box<Self>, cx: &mut Cx<'m>, grads: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let chunked = self.chunks.len() > 1;
        let packs = self.packs_saved_spikes;
        // The recomputation starts from no neuron states; the outer ones and the random
        // stream are back when its frame is left.
        let mut cx = cx.enter(Enter::Recompute { chunked, packs });
        self.recompute_backward(&mut cx, grads.outputs)
    }
}

impl<'m> CheckpointBackward<'m> {
    fn recompute_backward(
        self,
        cx: &mut Cx<'m>,
        mut out_grads: Vec<Option<Tensor>>,
    ) -> Result<Vec<Option<Tensor>>> {
        let CheckpointBackward {
            segment,
            path,
            state_prefixes,
            chunks,
            spans,
            input_needs,
            entry_states,
            final_states,
            n_out,
            packs_saved_spikes: _,
            boundaries,
            batch_norms,
        } = self;
        let state_grads = out_grads.split_off(n_out);
        let carry: Carry = final_states
            .into_iter()
            .zip(state_grads)
            .filter_map(|(p, g)| g.map(|g| (p, g)))
            .collect();
        let rc = Recompute {
            segment: &segment,
            path: &path,
            state_prefixes: &state_prefixes,
            spans: &spans,
            input_needs: &input_needs,
            boundaries,
        };
        let ran = {
            // The statistics are given for the recomputation and taken back after it.
            let mut cx = cx.enter(Enter::Statistics);
            for (p, stats) in &batch_norms {
                cx.batch_stats_mut().give(p.clone(), stats.clone());
            }
            let sums = chunk_passes::gradient_sum_passes(
                &mut cx,
                &rc,
                &chunks,
                &mut out_grads,
                &carry,
                &batch_norms,
            );
            sums.and_then(|()| {
                let data = chunks.into_iter().map(ChunkData::Owned).collect();
                chunk_passes::backward_chunks(&mut cx, &rc, data, &mut out_grads, carry, Pass::Backward)
            })
        };
        let (mut result, mut carry) = ran?;
        result.extend(entry_states.iter().map(|p| carry.remove(p)));
        Ok(result)
    }
}
