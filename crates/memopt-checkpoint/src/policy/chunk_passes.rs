//! The passes of a checkpointed segment that runs its time steps in chunks, and exact
//! training BatchNorm inside it.
//!
//! A training BatchNorm normalises with statistics over all `T x N` samples, and its backward
//! needs `sum(g)` and `sum(g * (x - mean))` over all of them before any input gradient. A
//! chunked segment that contains such BatchNorms (and is the first to see them: a segment
//! nested in another chunked segment finds their statistics given) computes them in passes:
//!
//! - forward, one statistics pass per BatchNorm, in the order the chunks reach them: every
//!   chunk runs (without recording) up to the first BatchNorm without statistics, which adds
//!   its chunk's sums and stops the chunk ([`crate::Stop::StatisticsGathered`]: the forward's
//!   end, not an error); the statistics are then finished (running statistics updated once, as
//!   unchunked) and given; a last pass runs the chunks with every statistic given and produces
//!   the outputs;
//! - backward, one gradient-sums pass per BatchNorm, last first: every chunk, last first,
//!   recomputes (parameters frozen, so no parameter gradient accumulates) and runs backward
//!   until it reaches that BatchNorm, which adds its chunk's gradient sums; the tape stops
//!   there and the neuron-state gradients reached so far carry to the previous chunk (every op
//!   recorded after the BatchNorm has run, so they are complete for the neurons after it);
//!   then the last pass runs the usual chunked recomputation with every sum given.
//!
//! The kernels fold the statistics in batch order and the gradient sums in reverse batch order
//! (`memopt_core::kernels::batch_norm`), the orders in which these passes visit the chunks, so
//! every value is bit-identical to the unchunked step. Each pass allocates through the same
//! code on every device, so Meta still measures the CPU's bytes exactly.

use super::chunk_grads::{self, InputGrad};
use super::saved_input::SavedInput;
use super::saved_state::SavedState;
use super::segment::Segment;
use crate::autograd::{Tape, Var, VarId};
use crate::context::{Cx, Enter, KeptBatchNormInputs, KeptPass};
use crate::{CheckpointError, Result, Stop};
use memopt_core::kernels::BatchNormStats;
use memopt_core::memory::{Phase, Scope, enter_scope};
use memopt_core::{ModulePath, RngState, Tensor};
use std::collections::BTreeMap;
use std::ops::Range;

/// What one chunk needs for its recomputation (with replayed boundaries, every chunk but the
/// first has no states: backward rebuilds them).
pub(super) struct ChunkSave {
    pub(super) inputs: Vec<SavedInput>,
    pub(super) states: Vec<(ModulePath, SavedState)>,
    pub(super) rng: RngState,
}

/// Neuron-state gradients carried from a chunk to the previous one, by module path.
pub(super) type Carry = BTreeMap<ModulePath, Tensor>;

fn pass_error(path: &ModulePath, segment: &Segment<'_>, message: String) -> CheckpointError {
    CheckpointError::Module {
        path: path.to_string(),
        module: segment.type_name(),
        message,
    }
}

/// The forward statistics passes of a segment run in `spans` (more than one) from `inputs`:
/// returns the statistics of the training BatchNorms inside that had none, in the order the
/// chunks reach them, and leaves them given in `cx` (the caller's `Enter::Statistics` frame
/// takes them back). Neuron states under `state_prefixes` are back at their entry values
/// afterwards. With `keep_inputs`
/// ([`crate::BatchNormInputs::Kept`]) the first pass keeps each chunk's input of the first
/// BatchNorm in [`Cx::kept_inputs`] and the later passes start from them; they stay there for
/// the pass giving the outputs (the caller drops them after it).
pub(super) fn statistics_passes<'m>(
    cx: &mut Cx<'m>,
    (segment, path): (&Segment<'m>, &ModulePath),
    state_prefixes: &[ModulePath],
    inputs: &[Var],
    (spans, keep_inputs): (&[Range<usize>], bool),
    rng_entry: RngState,
) -> Result<Vec<(ModulePath, BatchNormStats)>> {
    let pending = segment
        .batch_statistics(path, cx.is_training())
        .into_iter()
        .filter(|p| !cx.batch_stats().is_given(p))
        .count();
    let mut found: Vec<(ModulePath, BatchNormStats)> = Vec::new();
    if spans.len() <= 1 || pending == 0 {
        return Ok(found);
    }
    let entry = cx.states().under_any(state_prefixes);
    let mut ran = Ok(());
    if keep_inputs {
        cx.set_kept_inputs(Some(KeptBatchNormInputs::new()));
    }
    for pass in 0..pending {
        if let Some(kept) = cx.kept_inputs_mut() {
            kept.begin_pass(if pass == 0 {
                KeptPass::Keeping
            } else {
                KeptPass::Reusing
            });
        }
        cx.batch_stats_mut().begin_stats_pass();
        ran = statistics_pass(
            cx,
            segment,
            path,
            (state_prefixes, &entry),
            inputs,
            spans,
            rng_entry,
        );
        if ran.is_err() {
            cx.batch_stats_mut().abandon_stats_pass();
            break;
        }
        if cx.kept_inputs().is_some_and(|k| !k.all_reached(spans.len())) {
            ran = Err(pass_error(
                path,
                segment,
                "a time chunk of its first statistics pass did not reach a BatchNorm, so it has no input to keep"
                    .into(),
            ));
            cx.batch_stats_mut().abandon_stats_pass();
            break;
        }
        match cx.batch_stats_mut().end_stats_pass() {
            Ok(Some((bn, stats))) => {
                cx.batch_stats_mut().give(bn.clone(), stats.clone());
                found.push((bn, stats));
            }
            Ok(None) => break,
            Err(e) => {
                ran = Err(e);
                break;
            }
        }
    }
    cx.states_mut().restore_under(state_prefixes, &entry);
    match ran {
        Ok(()) => Ok(found),
        Err(e) => {
            cx.set_kept_inputs(None);
            Err(e)
        }
    }
}

/// One statistics pass: every chunk from the entry states until a BatchNorm stops it.
fn statistics_pass<'m>(
    cx: &mut Cx<'m>,
    segment: &Segment<'m>,
    path: &ModulePath,
    (state_prefixes, entry): (&[ModulePath], &[(ModulePath, Var)]),
    inputs: &[Var],
    spans: &[Range<usize>],
    rng_entry: RngState,
) -> Result<()> {
    cx.states_mut().restore_under(state_prefixes, entry);
    for (i, span) in spans.iter().enumerate() {
        // The same random stream as the chunk's real run.
        cx.rng().set_state(rng_entry);
        let xs = inputs
            .iter()
            .map(|v| v.narrow0(span.start, span.len()))
            .collect::<Result<Vec<_>>>()?;
        if let Some(kept) = cx.kept_inputs_mut() {
            kept.begin_chunk(i);
        }
        let followed = i + 1 < spans.len();
        match segment.forward(&mut cx.enter(Enter::Chunk { followed }), xs) {
            Err(Stop::StatisticsGathered) => {}
            // Every BatchNorm the chunks run has its statistics.
            Ok(_) if i == 0 => return Ok(()),
            Ok(_) => {
                return Err(pass_error(
                    path,
                    segment,
                    format!(
                        "time chunk {i} ran through while the first stopped at a BatchNorm: chunked segments need \
                         every chunk to run the same modules"
                    ),
                ));
            }
            Err(Stop::Error(e)) => return Err(e),
        }
    }
    Ok(())
}

/// What the backward of a chunked segment recomputes: the segment, where, and which inputs want
/// gradients.
pub(super) struct Recompute<'a, 'm> {
    pub(super) segment: &'a Segment<'m>,
    /// Scope the segment runs in.
    pub(super) path: &'a ModulePath,
    pub(super) state_prefixes: &'a [ModulePath],
    pub(super) spans: &'a [Range<usize>],
    pub(super) input_needs: &'a [bool],
    /// At which chunks the forward saved the starting states; the others are rebuilt by
    /// replaying the chunks since the last saved ones.
    pub(super) boundaries: super::ChunkBoundaries,
}

/// A chunk's saved inputs and states: kept (a gradient-sums pass restores copies) or consumed
/// (the last pass frees them as it goes).
pub(super) enum ChunkData<'a> {
    Kept(&'a ChunkSave),
    Owned(ChunkSave),
}

impl ChunkData<'_> {
    fn save(&self) -> &ChunkSave {
        match self {
            ChunkData::Kept(c) => c,
            ChunkData::Owned(c) => c,
        }
    }
}

/// The neuron states the chunk after `earlier` starts from, rebuilt by running the chunks of
/// `earlier` again from the states the first one saved: forward only, without recording, each
/// from its saved inputs (kept) and random stream, so every value is the forward's bit for
/// bit. Only the states stay; every other value is freed as the chunks run.
fn replay_states<'m>(
    cx: &mut Cx<'m>,
    rc: &Recompute<'_, 'm>,
    earlier: &[ChunkData<'_>],
) -> Result<Vec<(ModulePath, Tensor)>> {
    let tape = cx.take_tape();
    cx.states_mut().clear();
    if let Some(first) = earlier.first() {
        for (p, s) in &first.save().states {
            cx.states_mut().set(p.clone(), Var::constant(s.restore()?));
        }
    }
    let ran = (|| {
        let _replay = enter_scope(Scope::new(rc.path.clone(), Phase::Recompute));
        for chunk in earlier {
            let c = chunk.save();
            cx.rng().set_state(c.rng);
            let xs = c
                .inputs
                .iter()
                .map(|s| s.restore_kept(None))
                .collect::<Result<Vec<_>>>()?;
            // Followed by the chunk being rebuilt: the neurons keep their final states.
            drop(
                rc.segment
                    .forward(&mut cx.enter(Enter::Chunk { followed: true }), xs)
                    .map_err(Stop::into_error)?,
            );
        }
        cx.states()
            .under_any(rc.state_prefixes)
            .into_iter()
            .map(|(p, v)| Ok((p, v.into_tensor()?)))
            .collect::<Result<Vec<_>>>()
    })();
    cx.states_mut().clear();
    if let Some(tape) = tape {
        cx.start_tape(tape);
    }
    ran
}

/// The gradient-sums passes of the BatchNorms of `batch_norms` (given in `cx`), last first;
/// their sums are then given too. `out_grads` are the gradients of the segment's regular
/// outputs (narrowed per chunk, not consumed), `carry` those of its final states.
pub(super) fn gradient_sum_passes<'m>(
    cx: &mut Cx<'m>,
    rc: &Recompute<'_, 'm>,
    chunks: &[ChunkSave],
    out_grads: &mut [Option<Tensor>],
    carry: &Carry,
    batch_norms: &[(ModulePath, BatchNormStats)],
) -> Result<()> {
    let mut cx = cx.enter(Enter::FrozenParams);
    let mut ran = Ok(());
    for (bn, _) in batch_norms.iter().rev() {
        ran = cx.batch_stats_mut().begin_grad_pass(bn.clone());
        if ran.is_err() {
            break;
        }
        let data = chunks.iter().map(ChunkData::Kept).collect();
        ran = backward_chunks(&mut cx, rc, data, out_grads, carry.clone(), Pass::GradientSums).map(|_| ());
        if ran.is_err() {
            cx.batch_stats_mut().abandon_grad_pass();
            break;
        }
        ran = cx.batch_stats_mut().end_grad_pass();
        if ran.is_err() {
            break;
        }
    }
    ran
}

/// Which pass [`backward_chunks`] runs for the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    /// The segment's own gradient-sums pass: only the neuron-state gradients matter.
    GradientSums,
    /// The segment's backward proper (possibly inside an enclosing segment's gradient-sums
    /// pass).
    Backward,
}

/// Recomputes and backpropagates every chunk, last first, carrying neuron-state gradients
/// backwards: returns the input gradients (full length) and the gradients of the entry states.
/// Inside a gradient-sums pass each chunk's tape stops at the pass's BatchNorm, and the
/// BatchNorm counts as reached for an enclosing tape when some chunk reached it; in the
/// segment's own gradient-sums pass the inputs are constants and no input gradient is
/// returned.
pub(super) fn backward_chunks<'m>(
    cx: &mut Cx<'m>,
    rc: &Recompute<'_, 'm>,
    chunks: Vec<ChunkData<'_>>,
    out_grads: &mut [Option<Tensor>],
    mut carry: Carry,
    pass: Pass,
) -> Result<(Vec<Option<Tensor>>, Carry)> {
    let chunked = chunks.len() > 1;
    let sums_pass = pass == Pass::GradientSums;
    let mut reached_any = false;
    let mut input_grads: Vec<InputGrad> = rc.input_needs.iter().map(|_| InputGrad::Empty).collect();
    let mut chunks = chunks;
    // Ops the previous chunk recorded: the next records as many (the same modules run).
    let mut recorded = 0;
    for (i, span) in rc.spans.iter().enumerate().rev() {
        let chunk = chunks.pop().ok_or_else(|| {
            pass_error(
                rc.path,
                rc.segment,
                format!("time chunk {i} has nothing saved for its recomputation"),
            )
        })?;
        // Rebuilt before the chunk's inputs are restored, so the replay's values never
        // coexist with them.
        let replayed = if rc.boundaries.keeps_state_at(i) {
            None
        } else {
            let origin = rc.boundaries.replay_origin(i);
            let earlier = chunks.get(origin..).ok_or_else(|| {
                pass_error(
                    rc.path,
                    rc.segment,
                    format!("time chunk {i} replays from chunk {origin}, which is not saved"),
                )
            })?;
            Some(replay_states(cx, rc, earlier)?)
        };
        cx.batch_stats_mut().set_reached(false);
        // Inputs wanting a gradient become leaves of the chunk's tape (not in the segment's
        // own gradient-sums pass, whose inputs are constants); bit-packed spikes stay packed.
        let mut tape = Tape::with_capacity(recorded);
        let x_ids: Vec<Option<VarId>> = rc
            .input_needs
            .iter()
            .map(|needs| (*needs && !sums_pass).then(|| tape.input_leaf()))
            .collect();
        let (xs, states, rng) = match chunk {
            ChunkData::Kept(c) => (
                c.inputs
                    .iter()
                    .zip(&x_ids)
                    .map(|(s, id)| s.restore_kept(*id))
                    .collect::<Result<Vec<_>>>()?,
                c.states
                    .iter()
                    .map(|(p, s)| Ok((p.clone(), s.restore()?)))
                    .collect::<Result<Vec<_>>>()?,
                c.rng,
            ),
            ChunkData::Owned(c) => (
                c.inputs
                    .into_iter()
                    .zip(&x_ids)
                    .map(|(s, id)| s.restore(*id))
                    .collect::<Result<Vec<_>>>()?,
                c.states
                    .into_iter()
                    .map(|(p, s)| Ok((p, s.restore()?)))
                    .collect::<Result<Vec<_>>>()?,
                c.rng,
            ),
        };
        let states = replayed.unwrap_or(states);
        cx.rng().set_state(rng);
        cx.states_mut().clear();
        let mut state_ids = Vec::with_capacity(states.len());
        for (p, t) in states {
            let id = tape.input_leaf();
            cx.states_mut().set(p.clone(), Var::tracked(t, id));
            state_ids.push((p, id));
        }
        cx.start_tape(tape);
        let ys = {
            let _recompute = enter_scope(Scope::new(rc.path.clone(), Phase::Recompute));
            // The outputs serve only as seeds: the ops giving them need not materialise what
            // their backward does not keep.
            cx.arm_unread(true);
            rc.segment.forward(cx, xs)
        };
        let tape = cx.take_tape().ok_or_else(|| {
            pass_error(
                rc.path,
                rc.segment,
                "the recompute tape disappeared during the chunk's forward".into(),
            )
        })?;
        let ys = ys.map_err(Stop::into_error)?;
        recorded = tape.len();
        let mut seeds = Vec::new();
        for (y, g) in ys.iter().zip(out_grads.iter_mut()) {
            let Some(id) = y.id() else { continue };
            // With one chunk the output gradient moves into the seed, so the first backward
            // op holds it alone and may overwrite it.
            let seed = match g {
                Some(g) if chunked => Some(g.narrow0(span.start, span.len())?),
                g => g.take(),
            };
            if let Some(g) = seed {
                seeds.push((id, g));
            }
        }
        for (p, v) in cx.states().under_any(rc.state_prefixes) {
            if let (Some(id), Some(g)) = (v.id(), carry.remove(&p)) {
                seeds.push((id, g));
            }
        }
        drop(ys);
        cx.states_mut().clear();
        let mut leaf_grads = tape.backward(cx, seeds)?;
        reached_any |= cx.batch_stats().reached();
        if !sums_pass {
            assemble_input_grads(
                &mut input_grads,
                x_ids,
                &mut leaf_grads,
                (span, rc.spans),
                out_grads,
                chunked,
            )?;
        }
        carry = state_ids
            .into_iter()
            .filter_map(|(p, id)| leaf_grads.remove(&id).map(|g| (p, g)))
            .collect();
    }
    cx.batch_stats_mut().set_reached(reached_any);
    if !sums_pass {
        // Every chunk has read its span of the output gradients: free them before the input
        // gradients kept in pieces are put together.
        out_grads.iter_mut().for_each(|g| *g = None);
    }
    let input_grads = input_grads
        .into_iter()
        .map(InputGrad::finish)
        .collect::<Result<Vec<_>>>()?;
    Ok((input_grads, carry))
}

/// Puts a chunk's input gradients into the full-length ones (see
/// [`chunk_grads::place_input_grad`]: in a consumed output-gradient buffer when one fits), or
/// moves them there when the segment is not chunked.
fn assemble_input_grads(
    input_grads: &mut [InputGrad],
    x_ids: Vec<Option<VarId>>,
    leaf_grads: &mut std::collections::HashMap<VarId, Tensor>,
    (span, spans): (&Range<usize>, &[Range<usize>]),
    out_grads: &[Option<Tensor>],
    chunked: bool,
) -> Result<()> {
    let t = spans.last().map_or(0, |s| s.end);
    for (i, id) in x_ids.into_iter().enumerate() {
        let g = id.and_then(|id| leaf_grads.remove(&id));
        if !chunked {
            input_grads[i] = g.map_or(InputGrad::Empty, InputGrad::Full);
            continue;
        }
        chunk_grads::place_input_grad(&mut input_grads[i], g, span, t, out_grads)?;
    }
    Ok(())
}
