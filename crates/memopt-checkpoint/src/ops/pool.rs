//! Pooling.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::Tensor;
use memopt_core::kernels::{self, Pool2dParams};

/// Max pooling of `x [B, C, H, W]`; keeps the spike flag. Saves the argmax indices (u32).
pub fn max_pool2d<'m>(cx: &mut Cx<'m>, x: &Var, p: &Pool2dParams) -> Result<Var> {
    let (y, idx) = kernels::max_pool2d(&*x.tensor()?, p)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = MaxPoolBackward {
        indices: cx.save(&idx),
        input_dims: x.dims().to_vec(),
    };
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct MaxPoolBackward {
    indices: SavedTensor,
    input_dims: Vec<usize>,
}

impl Backward<1> for MaxPoolBackward {
    fn name(&self) -> &'static str {
        "max_pool2d"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::max_pool2d_backward(
            &grad,
            self.indices.tensor(),
            &self.input_dims,
        )?)])
    }
}

/// Average pooling of `x [B, C, H, W]` (PyTorch's `count_include_pad = true`). Saves nothing.
pub fn avg_pool2d<'m>(cx: &mut Cx<'m>, x: &Var, p: &Pool2dParams) -> Result<Var> {
    let y = kernels::avg_pool2d(&*x.tensor()?, p, true)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = AvgPoolBackward {
        input_dims: x.dims().to_vec(),
        params: *p,
    };
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct AvgPoolBackward {
    input_dims: Vec<usize>,
    params: Pool2dParams,
}

impl Backward<1> for AvgPoolBackward {
    fn name(&self) -> &'static str {
        "avg_pool2d"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::avg_pool2d_backward(
            &grad,
            &self.input_dims,
            &self.params,
            true,
        )?)])
    }
}

/// Adaptive average pooling of `x [B, C, H, W]` to `out_hw`. Saves nothing.
pub fn adaptive_avg_pool2d<'m>(cx: &mut Cx<'m>, x: &Var, out_hw: [usize; 2]) -> Result<Var> {
    let y = kernels::adaptive_avg_pool2d(&*x.tensor()?, out_hw)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = AdaptivePoolBackward {
        input_dims: x.dims().to_vec(),
    };
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct AdaptivePoolBackward {
    input_dims: Vec<usize>,
}

impl Backward<1> for AdaptivePoolBackward {
    fn name(&self) -> &'static str {
        "adaptive_avg_pool2d"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        Ok([Some(kernels::adaptive_avg_pool2d_backward(
            &grad,
            &self.input_dims,
        )?)])
    }
}
