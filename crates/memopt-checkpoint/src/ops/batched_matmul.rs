//! Batched matrix products (attention's `V K^T` and `(V K^T) Q`), with their backward.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedLayerInput, Var};
use crate::context::Cx;
use memopt_core::Tensor;
use memopt_core::kernels::{self, Transposed};

/// `op(a) x op(b)` for every item of the leading dimensions `a` and `b` share
/// ([`kernels::batched_matmul`]). Its backward keeps both operands; spike operands are kept
/// bit-packed where packed saves are on (attention's `Q`, `K`, `V` under
/// [`crate::Policy::StorePacked`]) and unpacked into temporaries for the backward kernel.
pub fn batched_matmul(cx: &mut Cx<'_>, a: &Var, b: &Var, transposed: Transposed) -> Result<Var> {
    let (at, bt) = (a.tensor()?, b.tensor()?);
    let y = kernels::batched_matmul(&at, &bt, transposed)?;
    if !cx.needs_grad(&[a, b]) {
        return Ok(Var::constant(y));
    }
    let op = BatchedMatmulBackward {
        a: cx.save_layer_input(a)?,
        b: cx.save_layer_input(b)?,
        transposed,
    };
    Ok(cx.record(Record::new(op, [Some(a), Some(b)]), y))
}

struct BatchedMatmulBackward {
    a: SavedLayerInput,
    b: SavedLayerInput,
    transposed: Transposed,
}

impl Backward<2> for BatchedMatmulBackward {
    fn name(&self) -> &'static str {
        "batched_matmul"
    }

    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 2]>,
    ) -> Result<[Option<Tensor>; 2]> {
        let grad = g.single_output()?;
        let [a, b] = g.inputs;
        let (a_saved, b_saved) = (self.a.whole()?, self.b.whole()?);
        let (ga, gb) = kernels::batched_matmul_backward(
            &grad,
            &a_saved,
            &b_saved,
            self.transposed,
            (a.needs_grad, b.needs_grad),
        )?;
        Ok([ga, gb])
    }
}
