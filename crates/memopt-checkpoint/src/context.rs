//! The forward context a module sees: device, RNG, mode, neuron states and calling children
//! (through the [`Dispatch`] of the policies in force); the [`Recorder`] of the step beneath it,
//! and the frame of the segment running (`context/frame.rs`).

use crate::autograd::{
    BackwardContext, Gradients, PausedTape, Record, RecordedOutputs, Recorder, SavedLayerInput, SavedTensor,
    StateStore, Tape, UpdateHook, Var, VarId,
};
use crate::param::Param;
use crate::{CheckpointError, Forward, Result};
use memopt_core::memory::{Phase, current_scope, enter_module, enter_phase};
use memopt_core::{Device, MemoryKind, Philox, Tensor};
use std::collections::HashMap;

mod batch_stats;
mod call_observer;
mod dispatch;
mod frame;
mod kept_inputs;
mod module;
mod outputs_unread;

pub(crate) use batch_stats::BatchStats;
pub use call_observer::{CallObserver, CallObserverGuard, ModuleCall, ValueInfo, observe_calls};
pub use dispatch::Dispatch;
pub(crate) use frame::Enter;
use frame::Frame;
pub(crate) use kept_inputs::{KeptBatchNormInputs, KeptPass};
pub(crate) use module::named_children;
pub use module::{Module, PlannerHints, module_cost};

/// Whether a forward pass records for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// Record a tape (training step).
    On,
    /// Record nothing (`no_grad`): every value is a constant, nothing is saved.
    Off,
}

/// The context a forward pass runs in. Modules call their children through [`Cx::call`], which
/// applies the memory policy assigned to the child's path through the context's [`Dispatch`].
pub struct Cx<'m> {
    device: Device,
    /// The tape, parameter gradients, readers and update in backward of the step.
    recorder: Recorder<'m, Cx<'m>>,
    rng: Philox,
    training: bool,
    /// What the segment running set for its run (`context/frame.rs`).
    frame: Frame,
    states: StateStore,
    /// Whether the caller reads the final neuron states after the pass (see
    /// [`Cx::set_keep_final_states`]).
    keep_final_states: bool,
    /// Whole-batch BatchNorm statistics and passes of the chunked segments running.
    batch_stats: BatchStats,
    /// What runs module calls under their policies (the policy layer's [`crate::PolicyTable`]).
    dispatch: &'m dyn Dispatch<'m>,
    /// Whether the next module call or op produces values read by no one: armed by
    /// [`Cx::final_op`], by [`Cx::call_children`] for a container's last child and by a
    /// recomputation for its segment; taken by the next module call
    /// or by an op ([`Cx::take_output_unread`]).
    unread_next: bool,
    /// Whether the next module call's outputs are its parent module's outputs (armed by
    /// [`Cx::final_op`] and for a container's last child, whether or not they are read; taken
    /// by the next module call and reported to call observers as [`ModuleCall::ends_parent`]).
    final_next: bool,
    /// The links the next [`Cx::call_children`] runs, `[start, end)` of its chain (set by
    /// [`Cx::set_chain_window`] for a child a run goes on into; taken by that call). `None`: all.
    chain_window: Option<(usize, usize)>,
    /// The kept BatchNorm inputs of the chunked segment whose forward runs, when it keeps
    /// them (`context/kept_inputs.rs`).
    kept_inputs: Option<KeptBatchNormInputs>,
}

impl<'m> Cx<'m> {
    /// A context on `device` running module calls through `dispatch` (a
    /// [`crate::PolicyTable`]: the policies of a plan), drawing random numbers from `rng`.
    pub fn new(
        device: Device,
        dispatch: &'m dyn Dispatch<'m>,
        rng: Philox,
        recording: Recording,
        training: bool,
    ) -> Self {
        Cx {
            device,
            recorder: Recorder::new(matches!(recording, Recording::On)),
            rng,
            training,
            frame: Frame::default(),
            states: StateStore::default(),
            keep_final_states: true,
            batch_stats: BatchStats::default(),
            dispatch,
            unread_next: false,
            final_next: false,
            chain_window: None,
            kept_inputs: None,
        }
    }

    /// Compute device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Where offloaded tensors go ([`Device::host`]): the host for a GPU (Meta of the CPU for
    /// Meta of a GPU); the same device otherwise (on the CPU the offloaded copy is tracked with
    /// kind `offloaded`, so the accounting stays honest).
    pub fn host_device(&self) -> Device {
        self.device.host()
    }

    /// Whether modules run in training mode (batch statistics, dropout).
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// Whether a tape is being recorded.
    pub fn is_recording(&self) -> bool {
        self.recorder.is_recording()
    }

    /// Whether this forward pass is a recomputation inside backward. Modules with side effects
    /// (BatchNorm running statistics) skip them then, so they happen once per step.
    pub fn is_recomputing(&self) -> bool {
        self.frame.recomputing()
    }

    /// Whether the current call runs on one time chunk of an enclosing chunked segment. A
    /// chunked child then splits each of its parent's chunks (into at most that many steps).
    pub fn in_time_chunk(&self) -> bool {
        self.frame.in_time_chunk()
    }

    /// The random generator (dropout masks, initialisation).
    pub fn rng(&mut self) -> &mut Philox {
        &mut self.rng
    }

    /// Parameter gradients accumulated so far.
    pub fn grads(&self) -> &Gradients {
        self.recorder.gradients()
    }

    /// Takes the accumulated parameter gradients, leaving none.
    pub fn take_grads(&mut self) -> Gradients {
        self.recorder.take_gradients()
    }

    /// Turns on the update in backward ([`crate::Plan::update_in_backward`]): as soon as no op
    /// still to run in backward reads a parameter, `update` receives its final gradient, which
    /// is then freed (with `keep_grads`, kept in [`Cx::grads`] instead, holding its memory).
    /// Parameters are updated while backward runs, so set it only for a step whose backward
    /// reads no parameter after its last reader (a training step).
    pub fn update_in_backward(&mut self, update: UpdateHook<'m>, keep_grads: bool) {
        self.recorder.update_in_backward(update, keep_grads);
    }

    /// Neuron states of this pass.
    pub fn states(&self) -> &StateStore {
        &self.states
    }

    /// Neuron states of this pass, to change (a segment saving or restoring them).
    pub(crate) fn states_mut(&mut self) -> &mut StateStore {
        &mut self.states
    }

    /// The kept BatchNorm inputs of the chunked segment running, when it keeps them.
    pub(crate) fn kept_inputs(&self) -> Option<&KeptBatchNormInputs> {
        self.kept_inputs.as_ref()
    }

    /// [`Cx::kept_inputs`], to change.
    pub(crate) fn kept_inputs_mut(&mut self) -> Option<&mut KeptBatchNormInputs> {
        self.kept_inputs.as_mut()
    }

    /// Sets the kept BatchNorm inputs of the chunked segment running (its frame gives the
    /// enclosing segment's back when it is left).
    pub(crate) fn set_kept_inputs(&mut self, kept: Option<KeptBatchNormInputs>) {
        self.kept_inputs = kept;
    }

    /// The state of the stateful module at the current scope path.
    pub fn state(&self) -> Option<Var> {
        self.states.get(current_scope().path()).cloned()
    }

    /// Sets the state of the stateful module at the current scope path.
    pub fn set_state(&mut self, state: Var) {
        self.states.set(current_scope().module_path().clone(), state);
    }

    /// Sets the final state a stateful module leaves at the current scope path, as it is when
    /// something may still read it ([`Cx::final_state_read`]); otherwise released: an
    /// unmaterialised stand-in with the same shape and tape id takes its place (a recomputed
    /// chunk's final state seeds the gradient carried from the next chunk by its id only), and
    /// the state's bytes are freed once the caller drops its handles. The choice depends on
    /// this context's options and position only, never on data, so Meta frees what the CPU
    /// frees.
    pub fn set_final_state(&mut self, state: Var) -> Result<()> {
        let state = if self.final_state_read() {
            state
        } else {
            state.released()?
        };
        self.set_state(state);
        Ok(())
    }

    /// Whether a final state written now may be read later in this pass: the caller keeps the
    /// final states ([`Cx::set_keep_final_states`]), or a time chunk runs that later chunks of
    /// the same forward pass follow (they start from the states it leaves). A recomputation's
    /// chunks start from the states saved in forward, so it reads none of the final states it
    /// recomputes (a checkpointed segment keeps only their tape ids, to seed the gradients
    /// carried between chunks).
    pub fn final_state_read(&self) -> bool {
        self.keep_final_states || self.frame.chunks_following()
    }

    /// Whether the final neuron states are kept for the caller ([`Cx::states`] after the pass).
    /// Kept by default; a training step keeps them only when asked
    /// (`StepOptions::keep_states`).
    pub fn keeps_final_states(&self) -> bool {
        self.keep_final_states
    }

    /// Sets whether the caller reads the final neuron states after this pass. When it does not,
    /// a neuron's final state is released as soon as nothing can read it: right after the
    /// neuron runs, or, inside a segment run in time chunks, in the last chunk (see
    /// [`Cx::set_final_state`]); [`Cx::states`] then holds unmaterialised stand-ins.
    pub fn set_keep_final_states(&mut self, keep: bool) {
        self.keep_final_states = keep;
    }

    /// Forgets all neuron states (start of a step: every neuron starts from its reset value).
    pub fn reset_states(&mut self) {
        self.states.clear();
    }

    /// A parameter as a value of this pass (on the tape when recording, unless a chunked
    /// BatchNorm's gradient-sums pass runs, which must not accumulate parameter gradients).
    pub fn param(&mut self, p: &Param) -> Var {
        self.recorder.param(p, self.frame.params_frozen())
    }

    /// An input value; with `requires_grad` its gradient is returned by [`Cx::backward`].
    pub fn leaf(&mut self, t: Tensor, requires_grad: bool) -> Var {
        self.recorder.leaf(t, requires_grad)
    }

    /// Whether any of `inputs` needs a gradient while recording: ops save nothing otherwise.
    pub fn needs_grad(&self, inputs: &[&Var]) -> bool {
        self.is_recording() && inputs.iter().any(|v| v.requires_grad())
    }

    /// Keeps `t` for backward (re-tagged saved-for-backward if it is an activation).
    pub fn save(&self, t: &Tensor) -> SavedTensor {
        SavedTensor::new(t)
    }

    /// Keeps a convolution's or linear layer's input `x` for its weight gradient (see
    /// [`SavedLayerInput`]): packed spikes stay packed and spike counts stay counts; f32 spikes
    /// are packed inside a module under [`crate::Policy::StorePacked`]; anything else is kept as it
    /// is.
    pub fn save_layer_input(&self, x: &Var) -> Result<SavedLayerInput> {
        SavedLayerInput::of(x, self.frame.packs_saved_spikes())
    }

    /// Whether convolution and linear layers keep spike inputs bit-packed for backward here.
    pub fn packs_saved_spikes(&self) -> bool {
        self.frame.packs_saved_spikes()
    }

    /// [`Cx::needs_grad`] over an op's input slots, absent optional inputs as `None`.
    pub fn slots_need_grad(&self, slots: &[Option<&Var>]) -> bool {
        self.is_recording() && slots.iter().flatten().any(|v| v.requires_grad())
    }

    /// Records an op (see [`Record`]) whose outputs are `outputs` (tensors, one tensor, or a
    /// value such as packed spikes), returning them as values of this pass: tracked when the op
    /// was recorded, as they are when no input needs a gradient or nothing records.
    pub fn record<O: RecordedOutputs>(&mut self, record: Record<'m, Self>, outputs: O) -> O::Values {
        self.recorder.record(record, outputs)
    }

    /// Sets the tape aside for a checkpointed segment's forward (see [`Recorder::pause`]).
    pub(crate) fn pause_tape(&mut self) -> PausedTape<'m, Self> {
        self.recorder.pause()
    }

    /// Puts the tape back after a segment's forward; returns the parameters it read.
    pub(crate) fn resume_tape(&mut self, paused: PausedTape<'m, Self>) -> Vec<crate::param::ParamId> {
        self.recorder.resume(paused)
    }

    /// Records from now on into `tape` (a chunk's recomputation).
    pub(crate) fn start_tape(&mut self, tape: Tape<'m, Self>) {
        self.recorder.start_tape(tape);
    }

    /// Takes the tape, leaving none (recording stops).
    pub(crate) fn take_tape(&mut self) -> Option<Tape<'m, Self>> {
        self.recorder.take_tape()
    }

    /// Calls child module `name` with `inputs`, under the child's scope and with the memory
    /// policy assigned to its path.
    pub fn call(&mut self, name: &str, module: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let _scope = enter_module(name);
        self.call_here(module, inputs)
    }

    /// Calls `module` in the current scope with the policy assigned to the current path (used
    /// for the root, whose path is empty).
    pub fn call_here(&mut self, module: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        if self.skipping_to_batch_norm() {
            return self.call_with_kept_inputs(module, inputs, |cx, inputs| cx.call_module(module, inputs));
        }
        self.call_module(module, inputs)
    }

    /// [`Cx::call_here`] once kept BatchNorm inputs are dealt with.
    fn call_module(&mut self, module: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let path = current_scope().module_path().clone();
        let ends_parent = std::mem::take(&mut self.final_next);
        let dispatch = self.dispatch;
        if !call_observer::observing() {
            return dispatch.run(self, path, module, inputs);
        }
        let infos: Vec<ValueInfo> = inputs.iter().map(ValueInfo::of_value).collect();
        let outputs = dispatch.run(self, path.clone(), module, inputs)?;
        let out_infos: Vec<ValueInfo> = outputs.iter().map(ValueInfo::of_value).collect();
        call_observer::notify(&ModuleCall {
            path: &path,
            phase: current_scope().phase(),
            module,
            ends_parent,
            inputs: &infos,
            outputs: &out_infos,
        });
        Ok(outputs)
    }

    /// Runs the children of `parent` (the module of the current scope, whose children form a
    /// chain) one after the other, each on the previous one's outputs (passed through
    /// [`PlannerHints::before_child`]), applying the policies assigned to runs of consecutive links
    /// of its chain (plan entries with `children`; see [`crate::module::chain_links`]). An
    /// inlined child that no run touches is called whole. A child that a run goes on into
    /// ([`crate::PlanEntry::into_next`]) runs its remaining links after the run.
    pub fn call_children(&mut self, parent: &'m dyn Module, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let dispatch = self.dispatch;
        dispatch.run_children(self, parent, inputs)
    }

    /// Runs links `start..end` of `parent`'s chain (the module of the current scope; see
    /// [`crate::module::chain_links`]), and the first `into_next` links of the child after them
    /// ([`crate::PlanEntry::into_next`]), as one segment under the policy assigned to that run,
    /// or one by one when it has none. `inputs` are link `start`'s (after
    /// [`PlannerHints::before_child`]); the run applies `before_child` to the later links itself.
    pub fn call_child_run(
        &mut self,
        parent: &'m dyn Module,
        start: usize,
        end: usize,
        into_next: usize,
        inputs: Vec<Var>,
    ) -> Forward<Vec<Var>> {
        let dispatch = self.dispatch;
        dispatch.run_child_range(self, parent, (start, end, into_next), inputs)
    }

    /// Sets the links the next [`Cx::call_children`] runs, `[start, end)` of its chain (for a
    /// child a run goes on into).
    pub(crate) fn set_chain_window(&mut self, window: (usize, usize)) {
        self.chain_window = Some(window);
    }

    /// Takes the links set by [`Cx::set_chain_window`] (`None`: all).
    pub(crate) fn take_chain_window(&mut self) -> Option<(usize, usize)> {
        self.chain_window.take()
    }

    /// The chunked-BatchNorm state of the segments running (`context/batch_stats.rs`).
    pub(crate) fn batch_stats(&self) -> &BatchStats {
        &self.batch_stats
    }

    /// The chunked-BatchNorm state of the segments running, to change.
    pub(crate) fn batch_stats_mut(&mut self) -> &mut BatchStats {
        &mut self.batch_stats
    }

    /// Calls a child with one input and one output.
    pub fn call1(&mut self, name: &str, module: &'m dyn Module, x: Var) -> Forward<Var> {
        let mut out = self.call(name, module, vec![x])?;
        match out.pop() {
            Some(y) if out.is_empty() => Ok(y),
            popped => {
                // The path is joined only to name the module in the error.
                out.extend(popped);
                Ok(single(out, current_scope().child(name).path(), module)?)
            }
        }
    }

    /// Runs backward from a scalar `loss`: parameter gradients accumulate into
    /// [`Cx::grads`]; returns the gradients of the leaves created with `requires_grad`.
    pub fn backward(&mut self, loss: &Var) -> Result<HashMap<VarId, Tensor>> {
        let id = loss.expect_id("the loss")?;
        if loss.shape().elem_count() != 1 {
            return Err(CheckpointError::Autograd(format!(
                "backward needs a scalar loss, got shape {}",
                loss.shape()
            )));
        }
        let tape = self.recorded_tape()?;
        let _phase = enter_phase(Phase::Backward);
        let seed = Tensor::full(loss.shape().clone(), 1.0, self.device, MemoryKind::Gradient)?;
        tape.backward(self, vec![(id, seed)])
    }

    /// The tape recorded so far, taken for backward (an error when nothing was recorded).
    fn recorded_tape(&mut self) -> Result<Tape<'m, Self>> {
        self.take_tape()
            .ok_or_else(|| CheckpointError::Autograd("backward called without a recorded tape".into()))
    }

    /// Runs backward from several values at once, each with the gradient flowing into it (a
    /// segment's outputs when it is run on its own). Returns the gradients of the leaves created
    /// with `requires_grad`.
    pub fn backward_with(&mut self, seeds: Vec<(VarId, Tensor)>) -> Result<HashMap<VarId, Tensor>> {
        let tape = self.recorded_tape()?;
        let _phase = enter_phase(Phase::Backward);
        tape.backward(self, seeds)
    }
}

impl<'m> BackwardContext<'m> for Cx<'m> {
    fn recorder(&mut self) -> &mut Recorder<'m, Self> {
        &mut self.recorder
    }

    fn stops_backward(&self) -> bool {
        self.batch_stats.reached()
    }
}

/// The single output of a module that must return exactly one.
pub(crate) fn single(mut out: Vec<Var>, path: &str, module: &dyn Module) -> Result<Var> {
    if out.len() != 1 {
        return Err(CheckpointError::Module {
            path: path.to_string(),
            module: module.type_name().to_string(),
            message: format!("expected one output, got {}", out.len()),
        });
    }
    Ok(out.pop().expect("length checked above"))
}
