//! Unread outputs: which module call or op produces values no one reads (the outputs of a
//! recomputed segment, whose backward needs only their tape ids, shapes and spike flags), and
//! which call's outputs are its parent's (reported to call observers, so that cost models know
//! which module ends a segment).

use super::Cx;
use super::frame::{Enter, FrameGuard};

impl<'m> Cx<'m> {
    /// Whether the values the current module call returns are read by no one: the call gives
    /// the outputs of a recomputed segment, of which backward needs only the tape ids (their
    /// gradients are the seeds), shapes and spike flags. A module whose outputs come unchanged
    /// (views aside) from one op or one child call runs that op or call in [`Cx::final_op`],
    /// which lets it skip materialising an output its own backward does not keep.
    pub fn outputs_unread(&self) -> bool {
        self.frame.outputs_unread()
    }

    /// Runs `f`, the one op or child call whose outputs the current module call returns
    /// unchanged (views such as reshapes aside): when [`Cx::outputs_unread`] holds, that op may
    /// return unmaterialised stand-ins ([`memopt_core::Tensor::unmaterialised`]) for outputs its backward does
    /// not keep, and that child is called with its own outputs unread. Calling anything else in
    /// `f` whose result the module reads would read a stand-in, which is an error
    /// ([`memopt_core::CoreError::Unmaterialised`]), never a wrong value.
    pub fn final_op<T, E>(
        &mut self,
        f: impl FnOnce(&mut Self) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.unread_next = self.outputs_unread();
        self.final_next = true;
        let out = f(self);
        self.unread_next = false;
        self.final_next = false;
        out
    }

    /// Called by an op before it allocates its outputs: whether they are read by no one (the op
    /// runs in [`Cx::final_op`] of a module call whose outputs are unread). An op that records
    /// its backward may then skip materialising every output that backward does not keep and
    /// return [`memopt_core::Tensor::unmaterialised`] stand-ins (same shape, dtype, device and spike flag);
    /// an op whose backward keeps its output (relu, sigmoid) must ignore the answer. Taking it
    /// disarms it, so later ops of the same module materialise theirs.
    pub fn take_output_unread(&mut self) -> bool {
        std::mem::take(&mut self.unread_next)
    }

    /// Arms [`Cx::take_output_unread`] / the next call's [`Cx::outputs_unread`] (recomputation
    /// does so for its segment).
    pub(crate) fn arm_unread(&mut self, unread: bool) {
        self.unread_next = unread;
    }

    /// Takes whether the next module call's outputs are its parent's (see
    /// [`crate::module::ModuleCall::ends_parent`]); a run of children passes it to its last child with
    /// [`Cx::arm_ends_parent`].
    pub(crate) fn take_ends_parent(&mut self) -> bool {
        std::mem::take(&mut self.final_next)
    }

    /// Arms whether the next module call's outputs are its parent's.
    pub(crate) fn arm_ends_parent(&mut self, ends: bool) {
        self.final_next = ends;
    }

    /// Enters the frame of a module call (a module's forward run by the dispatch or by a
    /// segment): [`Cx::outputs_unread`] is what was armed for it, which is disarmed.
    pub(crate) fn enter_call(&mut self) -> FrameGuard<'_, 'm> {
        let unread = std::mem::take(&mut self.unread_next);
        self.enter(Enter::Call { unread })
    }
}
