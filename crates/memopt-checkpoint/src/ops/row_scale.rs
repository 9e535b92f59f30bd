//! Rows scaled by a factor each (the spike-driven attention's `Q * kv`), with its backward.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedLayerInput, Var};
use crate::context::Cx;
use memopt_core::kernels;
use memopt_core::{MemoryKind, Tensor};

/// `x [.., L]` with each row of `L` values times its factor in `s` (shaped like `x` without
/// its last dimension) ([`kernels::scale_rows`]). Its backward keeps both; spikes are kept
/// bit-packed where packed saves are on.
pub fn scale_rows(cx: &mut Cx<'_>, x: &Var, s: &Var) -> Result<Var> {
    let y = kernels::scale_rows(&*x.tensor()?, &*s.tensor()?, MemoryKind::Activation)?;
    if !cx.needs_grad(&[x, s]) {
        return Ok(Var::constant(y));
    }
    let op = ScaleRowsBackward {
        x: cx.save_layer_input(x)?,
        s: cx.save_layer_input(s)?,
    };
    Ok(cx.record(Record::new(op, [Some(x), Some(s)]), y))
}

struct ScaleRowsBackward {
    x: SavedLayerInput,
    s: SavedLayerInput,
}

impl Backward<2> for ScaleRowsBackward {
    fn name(&self) -> &'static str {
        "scale_rows"
    }

    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 2]>,
    ) -> Result<[Option<Tensor>; 2]> {
        let grad = g.single_output()?;
        let [x_slot, s_slot] = g.inputs;
        let gx = if x_slot.needs_grad {
            Some(kernels::scale_rows(
                &grad,
                &*self.s.whole()?,
                MemoryKind::Gradient,
            )?)
        } else {
            None
        };
        let gs = if s_slot.needs_grad {
            // d/ds[r] = sum over the row of grad * x, accumulated in f64 in index order.
            let products = kernels::mul_backward(&grad, &*self.x.whole()?)?;
            let gs = kernels::sum_dim(&products, grad.rank() - 1)?;
            gs.set_kind(MemoryKind::Gradient);
            Some(gs)
        } else {
            None
        };
        Ok([gx, gs])
    }
}
