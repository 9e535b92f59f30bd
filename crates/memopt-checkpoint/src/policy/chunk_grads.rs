//! The input gradients of a time-chunked checkpoint node, assembled chunk by chunk.
//!
//! Chunks run backward last first, each reading its time span of the output gradients. Once a
//! chunk has run, its span of an output gradient is never read again; so an input gradient of
//! the same shape can live in that buffer, each chunk writing its span of the input gradient
//! over the span it has just consumed, instead of in a second full-length buffer. That takes
//! the same number of time steps and of elements, not the same shape: a time step's span is
//! the same range of the buffer in either shape. It holds
//! only when nothing else holds the output gradient ([`Tensor::is_exclusive`]), which depends
//! on handles, never on data, so Meta and the CPU allocate alike, and the values are the same
//! either way.
//!
//! When no output gradient can host it, each chunk's gradient is kept as the chunk gave it
//! ([`InputGrad::Pieces`]) and the full-length gradient is put together only once every chunk
//! has run and the output gradients are gone ([`InputGrad::finish`]). The pieces grow as the
//! chunks' kept boundary states are freed, so the backward never holds a full-length input
//! gradient beside all the kept states, as a buffer allocated at the first chunk would. Putting
//! it together copies each piece once, as writing it into a buffer would.

use crate::Result;
use memopt_core::{MemoryKind, Tensor, kernels};
use std::ops::Range;

/// One segment input's gradient while a chunked backward runs, last chunk first.
pub(super) enum InputGrad {
    /// No chunk has given one yet.
    Empty,
    /// The full-length gradient: written chunk by chunk into a consumed output gradient's
    /// buffer, or the only chunk's.
    Full(Tensor),
    /// Each chunk's gradient as the chunk gave it, with its time span, latest first; `t` time
    /// steps in all.
    Pieces {
        /// Time steps of the full-length gradient.
        t: usize,
        /// The chunks' gradients and their time spans.
        pieces: Vec<(Range<usize>, Tensor)>,
    },
}

impl InputGrad {
    /// The full-length gradient (`[t, ...]`, zero in the spans no chunk gave), or `None` when
    /// no chunk gave one. Pieces are copied into a new buffer in time order, each freed once
    /// copied.
    pub(super) fn finish(self) -> Result<Option<Tensor>> {
        match self {
            InputGrad::Empty => Ok(None),
            InputGrad::Full(full) => Ok(Some(full)),
            InputGrad::Pieces { t, mut pieces } => {
                let Some((_, first)) = pieces.first() else {
                    return Ok(None);
                };
                let shape = first.shape().with_dim0(t);
                let full = Tensor::zeros(shape, first.dtype(), first.device(), MemoryKind::Gradient)?;
                // Latest first: pop the earliest span each time.
                while let Some((span, g)) = pieces.pop() {
                    kernels::assign(&full.narrow0(span.start, span.len())?, &g)?;
                }
                Ok(Some(full))
            }
        }
    }
}

/// Puts chunk `span`'s gradient `g` of one segment input (`None`: this chunk gave it none,
/// i.e. zero) into the input's gradient `full`: at the first chunk that gives one, in the
/// buffer of an output gradient of `out_grads` with as many time steps and elements (viewed in
/// the input's shape) that nothing else holds (chunks after `span` have already read theirs),
/// else as the first of the chunks' pieces ([`InputGrad::Pieces`]). Spans that get no
/// gradient end up zero either way.
pub(super) fn place_input_grad(
    full: &mut InputGrad,
    g: Option<Tensor>,
    span: &Range<usize>,
    t: usize,
    out_grads: &[Option<Tensor>],
) -> Result<()> {
    let hosted = |f: &Tensor| out_grads.iter().flatten().any(|o| o.same_storage(f));
    let Some(g) = g else {
        // A span of a reused output gradient still holds that gradient: zero it.
        if let InputGrad::Full(f) = full
            && hosted(f)
        {
            zero(&f.narrow0(span.start, span.len())?)?;
        }
        return Ok(());
    };
    if let InputGrad::Empty = full {
        let shape = g.shape().with_dim0(t);
        let host = out_grads.iter().flatten().find(|o| {
            o.dims().first() == Some(&t)
                && o.elem_count() == shape.elem_count()
                && o.dtype() == g.dtype()
                && o.device() == g.device()
                && o.is_materialised()
                && o.is_exclusive()
        });
        *full = match host {
            Some(o) => {
                // Same time steps and element count, so each time step's span of the input
                // gradient covers exactly that step's span of the output gradient, whatever the
                // per-step shapes (a block mapping [64, 48, 48] to [256, 24, 24] per step).
                let f = o.reshape(shape)?;
                // The chunks after this one gave no gradient to this input: zero their spans.
                if span.end < t {
                    zero(&f.narrow0(span.end, t - span.end)?)?;
                }
                InputGrad::Full(f)
            }
            None => InputGrad::Pieces {
                t,
                pieces: Vec::new(),
            },
        };
    }
    match full {
        InputGrad::Empty => Ok(()),
        InputGrad::Pieces { pieces, .. } => {
            pieces.push((span.clone(), g));
            Ok(())
        }
        InputGrad::Full(f) => {
            let dst = f.narrow0(span.start, span.len())?;
            if g.same_view(&dst) {
                // The chunk's gradient is already its span of the buffer (a segment passing an
                // input through to an output of the same shape).
                return Ok(());
            }
            if g.same_storage(f) {
                // Another span of the same buffer: copy it out first (the copy is exact).
                let copy = kernels::scale(&g, 1.0)?;
                return Ok(kernels::assign(&dst, &copy)?);
            }
            Ok(kernels::assign(&dst, &g)?)
        }
    }
}

/// Writes zeros over `dst`.
fn zero(dst: &Tensor) -> Result<()> {
    let zeros = Tensor::zeros(
        dst.shape().clone(),
        dst.dtype(),
        dst.device(),
        MemoryKind::Gradient,
    )?;
    Ok(kernels::assign(dst, &zeros)?)
}
