//! Shape ops (views: no data moves).

use super::single_grad;
use crate::Result;
use crate::autograd::{BackwardGrads, BackwardOp, Var};
use crate::context::Cx;
use memopt_core::{Shape, Tensor};

/// A view of `x` with shape `dims` (same element count). Keeps the spike flag.
pub fn reshape<'m>(cx: &mut Cx<'m>, x: &Var, dims: impl Into<Shape>) -> Result<Var> {
    let y = x.tensor().reshape(dims)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = ReshapeBackward {
        input: x.shape().clone(),
    };
    Ok(cx.record1(op, &[x], y))
}

struct ReshapeBackward {
    input: Shape,
}

impl<'m> BackwardOp<'m> for ReshapeBackward {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(single_grad(&g)?.reshape(self.input)?)])
    }
}
