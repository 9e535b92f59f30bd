//! Multi-step inputs `[T, N, ...]` for stateless layers: fold `T` into the batch and back.

use crate::autograd::Var;
use crate::context::Cx;
use crate::{CheckpointError, Result, ops};

/// How an input was folded: `Some([T, N])` for a multi-step input, `None` for a plain batch.
pub(crate) type Folded = Option<[usize; 2]>;

/// Folds `x` into `[T*N, rest]` when it has `rank + 1` dimensions; passes it through when it has
/// `rank`. Any other rank is an error naming both accepted layouts.
pub(crate) fn fold_time<'m>(
    cx: &mut Cx<'m>,
    x: &Var,
    rank: usize,
    module: &str,
    layout: &str,
) -> Result<(Var, Folded)> {
    let d = x.dims();
    if d.len() == rank {
        return Ok((x.clone(), None));
    }
    if d.len() == rank + 1 {
        let (t, n) = (d[0], d[1]);
        let mut folded = Vec::with_capacity(d.len() - 1);
        folded.push(t * n);
        folded.extend_from_slice(&d[2..]);
        return Ok((ops::reshape(cx, x, folded)?, Some([t, n])));
    }
    Err(CheckpointError::in_module(
        module,
        format!(
            "expected input [T, N, {layout}] or [N, {layout}], got {}",
            x.shape()
        ),
    ))
}

/// Undoes [`fold_time`] on an output `[T*N, rest]`.
pub(crate) fn unfold_time<'m>(cx: &mut Cx<'m>, y: Var, folded: Folded) -> Result<Var> {
    match folded {
        None => Ok(y),
        Some([t, n]) => {
            let rest = &y.dims()[1..];
            let mut dims = Vec::with_capacity(rest.len() + 2);
            dims.extend_from_slice(&[t, n]);
            dims.extend_from_slice(rest);
            ops::reshape(cx, &y, dims)
        }
    }
}

/// A view of `x` with its dimensions from `start` on merged into one (`[T, N, C, H, W]` from 3:
/// `[T, N, C, H * W]`). `x` must have more than `start` dimensions.
pub(crate) fn flatten_from<'m>(cx: &mut Cx<'m>, x: &Var, start: usize) -> Result<Var> {
    let d = x.dims();
    let mut dims = d[..start].to_vec();
    dims.push(d[start..].iter().product());
    ops::reshape(cx, x, dims)
}

/// Time steps folded into the batch (1 for a plain batch).
pub(crate) fn time_steps(folded: Folded) -> usize {
    folded.map_or(1, |[t, _]| t)
}

/// The one input of a single-input module, or an error naming the module.
pub(crate) fn one_input(mut inputs: Vec<Var>, module: &str) -> Result<Var> {
    if inputs.len() != 1 {
        return Err(CheckpointError::in_module(
            module,
            format!("expected one input, got {}", inputs.len()),
        ));
    }
    Ok(inputs.pop().expect("length checked above"))
}
