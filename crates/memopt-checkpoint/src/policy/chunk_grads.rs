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

use crate::Result;
use memopt_core::{MemoryKind, Tensor, kernels};
use std::ops::Range;

/// Puts chunk `span`'s gradient `g` of one segment input (`None`: this chunk gave it none,
/// i.e. zero) into the input's full gradient `full` (`[t, ...]`), created at the first chunk
/// that gives one: in the buffer of an output gradient of `out_grads` with as many time steps
/// and elements (viewed in the input's shape) that
/// nothing else holds (chunks after `span` have already read theirs), else as zeros. Spans that
/// get no gradient end up zero either way.
pub(super) fn place_input_grad(
    full: &mut Option<Tensor>,
    g: Option<Tensor>,
    span: &Range<usize>,
    t: usize,
    out_grads: &[Option<Tensor>],
) -> Result<()> {
    let hosted = |f: &Tensor| out_grads.iter().flatten().any(|o| o.same_storage(f));
    let Some(g) = g else {
        // A span of a reused output gradient still holds that gradient: zero it.
        if let Some(f) = full.as_ref().filter(|f| hosted(f)) {
            zero(&f.narrow0(span.start, span.len())?)?;
        }
        return Ok(());
    };
    if full.is_none() {
        let shape = g.shape().with_dim0(t);
        let host = out_grads.iter().flatten().find(|o| {
            o.dims().first() == Some(&t)
                && o.elem_count() == shape.elem_count()
                && o.dtype() == g.dtype()
                && o.device() == g.device()
                && o.is_materialised()
                && o.is_exclusive()
        });
        *full = Some(match host {
            Some(o) => {
                // Same time steps and element count, so each time step's span of the input
                // gradient covers exactly that step's span of the output gradient, whatever the
                // per-step shapes (a block mapping [64, 48, 48] to [256, 24, 24] per step).
                let f = o.reshape(shape)?;
                // The chunks after this one gave no gradient to this input: zero their spans.
                if span.end < t {
                    zero(&f.narrow0(span.end, t - span.end)?)?;
                }
                f
            }
            None => Tensor::zeros(shape, g.dtype(), g.device(), MemoryKind::Gradient)?,
        });
    }
    let Some(f) = full.as_ref() else {
        return Ok(());
    };
    let dst = f.narrow0(span.start, span.len())?;
    if g.same_view(&dst) {
        // The chunk's gradient is already its span of the buffer (a segment passing an input
        // through to an output of the same shape).
        return Ok(());
    }
    if g.same_storage(f) {
        // Another span of the same buffer: copy it out first (the copy is exact).
        let copy = kernels::scale(&g, 1.0)?;
        return Ok(kernels::assign(&dst, &copy)?);
    }
    Ok(kernels::assign(&dst, &g)?)
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
