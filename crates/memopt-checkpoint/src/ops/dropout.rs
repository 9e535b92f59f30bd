//! Dropout with a mask regenerated from the RNG state instead of stored.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, Var};
use crate::context::Cx;
use memopt_core::{RngState, Tensor, kernels};

/// Zeroes each element with probability `p` and scales the rest by `1/(1-p)`; identity in eval
/// mode or for `p = 0`. The mask repeats every `mask_period` elements (`elem_count / T` shares
/// one mask over time steps, as SpikingJelly's multi-step Dropout does). The mask is never
/// stored: backward regenerates it from the saved RNG state.
pub fn dropout<'m>(cx: &mut Cx<'m>, x: &Var, p: f32, mask_period: usize) -> Result<Var> {
    if !cx.is_training() || p == 0.0 {
        return Ok(x.clone());
    }
    let rng = cx.rng().reserve(mask_period as u64);
    let y = kernels::dropout(&*x.tensor()?, p, rng, mask_period)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    Ok(cx.record(Record::new(DropoutBackward { p, rng, mask_period }, [Some(x)]), y))
}

struct DropoutBackward {
    p: f32,
    rng: RngState,
    mask_period: usize,
}

impl Backward<1> for DropoutBackward {
    fn name(&self) -> &'static str {
        "dropout"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::dropout_backward(
            &grad,
            self.p,
            self.rng,
            self.mask_period,
        )?)])
    }
}
