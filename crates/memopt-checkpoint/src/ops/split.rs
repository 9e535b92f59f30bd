//! Splitting a value into parts along one dimension (attention's `Q, K, V` from one
//! projection), with its backward: the parts' gradients concatenated.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, Var};
use crate::context::Cx;
use memopt_core::kernels;
use memopt_core::{DType, MemoryKind, Shape, Tensor};

/// Parts of `x` along `dim` of the given `sizes` (which add up to `x`'s size there), each a
/// contiguous copy. Keeps the spike flag. Its backward keeps only the shapes.
pub fn split(cx: &mut Cx<'_>, x: &Var, dim: usize, sizes: &[usize]) -> Result<Vec<Var>> {
    let parts = kernels::split_dim(&*x.tensor()?, dim, sizes)?;
    if !cx.needs_grad(&[x]) {
        return Ok(parts.into_iter().map(Var::constant).collect());
    }
    let op = SplitBackward {
        dim,
        parts: parts.iter().map(|p| p.shape().clone()).collect(),
    };
    Ok(cx.record(Record::new(op, [Some(x)]), parts))
}

struct SplitBackward {
    dim: usize,
    parts: Vec<Shape>,
}

impl Backward<1> for SplitBackward {
    fn name(&self) -> &'static str {
        "split"
    }

    fn backward(
        self,
        _params: &mut Gradients,
        mut g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let device = g.outputs.iter().flatten().next().map(Tensor::device);
        let Some(device) = device else {
            return Ok([None]);
        };
        let grads = self
            .parts
            .iter()
            .enumerate()
            .map(|(i, shape)| match g.take_output(i) {
                Some(t) => Ok(t),
                None => Tensor::zeros(shape.dims(), DType::F32, device, MemoryKind::Gradient),
            })
            .collect::<memopt_core::Result<Vec<_>>>()?;
        Ok([Some(kernels::cat_dim(&grads, self.dim, MemoryKind::Gradient)?)])
    }
}
