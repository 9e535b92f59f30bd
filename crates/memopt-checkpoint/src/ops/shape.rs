//! Shape ops (views: no data moves).

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, Var};
use crate::context::Cx;
use memopt_core::{Shape, Tensor};

/// A view of `x` with shape `dims` (same element count). Keeps the spike flag; packed spikes
/// stay packed.
pub fn reshape<'m>(cx: &mut Cx<'m>, x: &Var, dims: impl Into<Shape>) -> Result<Var> {
    let y = x.reshaped(dims.into())?;
    if !cx.needs_grad(&[x]) {
        return Ok(y);
    }
    let op = ReshapeBackward {
        input: x.shape().clone(),
    };
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct ReshapeBackward {
    input: Shape,
}

impl Backward<1> for ReshapeBackward {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        Ok([Some(g.single_output()?.reshape(self.input)?)])
    }
}
