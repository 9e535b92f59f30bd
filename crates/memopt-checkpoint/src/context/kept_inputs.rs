//! Kept BatchNorm inputs ([`crate::BatchNormInputs::Kept`]): the first statistics pass of a
//! time-chunked segment keeps each chunk's input of the segment's first training BatchNorm,
//! and the later forward passes start each chunk there. The layers called before that
//! BatchNorm (stateless, in a chain: `Segment::batch_norm_inputs_keepable`) are skipped in
//! those passes: each call returns unmaterialised stand-ins of the outputs it gave in the
//! statistics pass (reading one is an error, never a wrong value), and the BatchNorm's call
//! gets the kept input, with the random stream where the statistics pass had it. Values are
//! bit-identical: the kept input is the one the skipped layers would compute again.

use super::Cx;
use super::Module;
use crate::autograd::Var;
use crate::{CheckpointError, Forward, Result, Stop};
use memopt_core::memory::current_scope;
use memopt_core::{DType, KnownValues, RngState, Shape, Tensor};

/// What a chunk's statistics pass saw before its first BatchNorm.
struct KeptChunk {
    /// The outputs of each layer called before the BatchNorm, in call order: shape, element
    /// type and what is known about their values, for the stand-ins.
    skipped: Vec<Vec<(Shape, DType, KnownValues)>>,
    /// The BatchNorm's inputs and the random stream when it was called; `None` before the
    /// BatchNorm is reached and once taken.
    call: Option<(Vec<Var>, RngState)>,
}

/// Whether a pass keeps the BatchNorm inputs or starts its chunks from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptPass {
    /// The first statistics pass: runs every layer, keeps the BatchNorm inputs.
    Keeping,
    /// A later statistics pass: skips the layers before the BatchNorm and gives it a handle to
    /// the kept input (kept for the passes after it).
    Reusing,
    /// The last pass (the outputs): skips the layers before the BatchNorm and hands it the kept
    /// input, which is freed once the BatchNorm has read it.
    Taking,
}

/// The kept BatchNorm inputs of the chunked segment whose forward runs (see the module docs).
pub(crate) struct KeptBatchNormInputs {
    pass: KeptPass,
    chunks: Vec<KeptChunk>,
    /// The chunk running.
    chunk: usize,
    /// Layers of the running chunk skipped so far.
    cursor: usize,
    /// Whether the running chunk has reached its BatchNorm (later calls run as usual).
    reached: bool,
}

impl KeptBatchNormInputs {
    /// Ready for the first statistics pass.
    pub(crate) fn new() -> Self {
        KeptBatchNormInputs {
            pass: KeptPass::Keeping,
            chunks: Vec::new(),
            chunk: 0,
            cursor: 0,
            reached: false,
        }
    }

    /// Starts a pass of kind `pass`.
    pub(crate) fn begin_pass(&mut self, pass: KeptPass) {
        self.pass = pass;
    }

    /// Starts chunk `i` of the running pass.
    pub(crate) fn begin_chunk(&mut self, i: usize) {
        self.chunk = i;
        self.cursor = 0;
        self.reached = false;
        if self.pass == KeptPass::Keeping && self.chunks.len() <= i {
            self.chunks.push(KeptChunk {
                skipped: Vec::new(),
                call: None,
            });
        }
    }

    /// Whether every chunk of the first statistics pass reached the BatchNorm (a pass that
    /// ran through without stopping at one has nothing to keep).
    pub(crate) fn all_reached(&self, chunks: usize) -> bool {
        self.chunks.len() == chunks && self.chunks.iter().all(|c| c.call.is_some())
    }
}

/// The error of a pass that does not call the layers its statistics pass called.
fn mismatch(module: &dyn Module, what: String) -> Stop {
    Stop::Error(CheckpointError::Module {
        path: current_scope().module_path().to_string(),
        module: module.type_name().to_string(),
        message: format!(
            "a time chunk keeping its BatchNorm inputs {what}; keep them only for segments whose layers before \
             the first BatchNorm run the same way in every pass (drop \"batch_norm_inputs\")"
        ),
    })
}

impl<'m> Cx<'m> {
    /// Whether module calls go through [`Cx::call_with_kept_inputs`]: a chunked segment keeping
    /// its BatchNorm inputs runs a forward pass and its running chunk has not reached the
    /// BatchNorm yet.
    pub(crate) fn skipping_to_batch_norm(&self) -> bool {
        self.kept_inputs.as_ref().is_some_and(|k| !k.reached)
    }

    /// Calls `module` (a leaf when it matters: containers run as usual and call their children
    /// through here) while a pass keeps or starts from the BatchNorm inputs: see the module
    /// docs. `call` runs a module as [`Cx::call_here`] does.
    pub(super) fn call_with_kept_inputs(
        &mut self,
        module: &'m dyn Module,
        inputs: Vec<Var>,
        call: impl FnOnce(&mut Self, Vec<Var>) -> Forward<Vec<Var>>,
    ) -> Forward<Vec<Var>> {
        if !module.children().is_empty() {
            return call(self, inputs);
        }
        let is_batch_norm = module.batch_statistics(self.is_training());
        let rng = self.rng.state();
        let device = self.device();
        let Some(kept) = self.kept_inputs.as_mut() else {
            return call(self, inputs);
        };
        let chunk_index = kept.chunk;
        let Some(chunk) = kept.chunks.get_mut(chunk_index) else {
            return Err(mismatch(
                module,
                format!("ran chunk {chunk_index}, which its statistics pass did not"),
            ));
        };
        match kept.pass {
            KeptPass::Keeping if is_batch_norm => {
                chunk.call = Some((inputs.clone(), rng));
                kept.reached = true;
                call(self, inputs)
            }
            KeptPass::Keeping => {
                let outputs = call(self, inputs)?;
                if let Some(kept) = self.kept_inputs.as_mut()
                    && let Some(chunk) = kept.chunks.get_mut(chunk_index)
                {
                    chunk.skipped.push(
                        outputs
                            .iter()
                            .map(|v| (v.shape().clone(), v.dtype(), v.known_values()))
                            .collect(),
                    );
                }
                Ok(outputs)
            }
            KeptPass::Reusing | KeptPass::Taking => {
                if let Some(outputs) = chunk.skipped.get(kept.cursor) {
                    kept.cursor += 1;
                    // The call is skipped: what was armed for it goes unused.
                    self.unread_next = false;
                    self.final_next = false;
                    let stand_ins = outputs
                        .iter()
                        .map(|(shape, dtype, values)| {
                            Ok(Var::constant(
                                Tensor::unmaterialised(shape.clone(), *dtype, device)?
                                    .with_known_values(*values),
                            ))
                        })
                        .collect::<Result<Vec<_>>>();
                    return Ok(stand_ins?);
                }
                if !is_batch_norm {
                    return Err(mismatch(
                        module,
                        format!(
                            "called {} where its statistics pass called the BatchNorm",
                            module.type_name()
                        ),
                    ));
                }
                let given = match kept.pass {
                    KeptPass::Taking => chunk.call.take(),
                    _ => chunk.call.clone(),
                };
                let Some((given, at)) = given else {
                    return Err(mismatch(
                        module,
                        format!("found no input kept for chunk {chunk_index}"),
                    ));
                };
                kept.reached = true;
                drop(inputs);
                self.rng.set_state(at);
                call(self, given)
            }
        }
    }
}
