//! The frame of the segment running: what a checkpointed or chunked segment sets for its run
//! (recomputing, in a time chunk, chunks following, packed saves, frozen parameters, its kept
//! BatchNorm inputs, the whole-batch BatchNorm statistics it gives, the neuron states and
//! random stream it started from), and whether the module call running has its outputs read. A segment enters
//! its frame with [`Cx::enter`]; the returned guard gives the context back as it was when it
//! is dropped, whatever happened in between (an error included).

use super::{Cx, KeptBatchNormInputs};
use crate::autograd::StateStore;
use memopt_core::{ModulePath, RngState};
use std::ops::{Deref, DerefMut};

/// The flags of the frame running (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Frame {
    recomputing: bool,
    in_time_chunk: bool,
    chunks_following: bool,
    packs_saved_spikes: bool,
    params_frozen: bool,
    outputs_unread: bool,
}

impl Frame {
    /// Whether a recomputation inside backward runs.
    pub(crate) fn recomputing(&self) -> bool {
        self.recomputing
    }

    /// Whether the call runs on one time chunk of an enclosing chunked segment.
    pub(crate) fn in_time_chunk(&self) -> bool {
        self.in_time_chunk
    }

    /// Whether later chunks of the same forward pass follow the chunk running.
    pub(crate) fn chunks_following(&self) -> bool {
        self.chunks_following
    }

    /// Whether convolution and linear layers keep spike inputs bit-packed for backward.
    pub(crate) fn packs_saved_spikes(&self) -> bool {
        self.packs_saved_spikes
    }

    /// Whether parameters are constants (a gradient-sums pass).
    pub(crate) fn params_frozen(&self) -> bool {
        self.params_frozen
    }

    /// Whether the values the module call running returns are read by no one.
    pub(crate) fn outputs_unread(&self) -> bool {
        self.outputs_unread
    }
}

/// What a frame entered changes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Enter {
    /// A module under [`crate::Policy::StorePacked`], or a recomputation of a segment whose
    /// forward ran where layers pack their saved spikes: packing set to this.
    PackedSaves(bool),
    /// A checkpointed segment's forward: in a time chunk when `chunked`; its own kept
    /// BatchNorm inputs (none at first; the enclosing segment's come back when it is left).
    SegmentForward {
        /// Whether the segment runs in more than one time chunk.
        chunked: bool,
    },
    /// A checkpointed segment's recomputation in backward: recomputing, in a time chunk when
    /// `chunked`, packing as its forward did; the neuron states and random stream come back
    /// when it is left.
    Recompute {
        /// Whether the segment runs in more than one time chunk.
        chunked: bool,
        /// Whether its forward packed saved spikes.
        packs: bool,
    },
    /// One time chunk of a forward pass over a segment's chunks; `followed`: later chunks of
    /// the same pass follow it (and read the final states it leaves).
    Chunk {
        /// Whether later chunks follow.
        followed: bool,
    },
    /// A gradient-sums pass: parameters are constants.
    FrozenParams,
    /// A chunked segment's run with the whole-batch BatchNorm statistics it gives (to its
    /// BatchNorms and the segments nested in it): every statistic given while the frame lasts
    /// is taken back when it is left.
    Statistics,
    /// A module call; `unread`: nobody reads the values it returns (see
    /// [`Cx::outputs_unread`]).
    Call {
        /// Whether its outputs are read by no one.
        unread: bool,
    },
}

/// The context inside a frame; dropping it restores the frame before (see the module docs).
pub(crate) struct FrameGuard<'c, 'm> {
    cx: &'c mut Cx<'m>,
    outer: Frame,
    /// The enclosing segment's kept BatchNorm inputs, when this frame set them aside.
    outer_kept: Option<Option<KeptBatchNormInputs>>,
    /// The neuron states and random stream before a recomputation.
    outer_run: Option<(StateStore, RngState)>,
    /// The BatchNorms whose statistics were given before a [`Enter::Statistics`] frame.
    outer_given: Option<Vec<ModulePath>>,
}

impl<'m> Cx<'m> {
    /// Enters a frame; the guard restores the frame before when dropped.
    pub(crate) fn enter(&mut self, enter: Enter) -> FrameGuard<'_, 'm> {
        let outer = self.frame;
        let mut frame = outer;
        let (mut outer_kept, mut outer_run, mut outer_given) = (None, None, None);
        match enter {
            Enter::PackedSaves(packs) => frame.packs_saved_spikes = packs,
            Enter::SegmentForward { chunked } => {
                frame.in_time_chunk |= chunked;
                outer_kept = Some(self.kept_inputs.take());
            }
            Enter::Recompute { chunked, packs } => {
                frame.recomputing = true;
                frame.in_time_chunk |= chunked;
                frame.packs_saved_spikes = packs;
                outer_run = Some((std::mem::take(&mut self.states), self.rng.state()));
            }
            Enter::Chunk { followed } => frame.chunks_following |= followed,
            Enter::FrozenParams => frame.params_frozen = true,
            Enter::Statistics => outer_given = Some(self.batch_stats.given_paths()),
            Enter::Call { unread } => frame.outputs_unread = unread,
        }
        self.frame = frame;
        FrameGuard {
            cx: self,
            outer,
            outer_kept,
            outer_run,
            outer_given,
        }
    }
}

impl<'m> Deref for FrameGuard<'_, 'm> {
    type Target = Cx<'m>;

    fn deref(&self) -> &Cx<'m> {
        self.cx
    }
}

impl<'m> DerefMut for FrameGuard<'_, 'm> {
    fn deref_mut(&mut self) -> &mut Cx<'m> {
        self.cx
    }
}

impl Drop for FrameGuard<'_, '_> {
    fn drop(&mut self) {
        self.cx.frame = self.outer;
        if let Some(kept) = self.outer_kept.take() {
            self.cx.kept_inputs = kept;
        }
        if let Some((states, rng)) = self.outer_run.take() {
            self.cx.states = states;
            self.cx.rng.set_state(rng);
        }
        if let Some(given) = self.outer_given.take() {
            self.cx.batch_stats.keep_given(&given);
        }
    }
}
