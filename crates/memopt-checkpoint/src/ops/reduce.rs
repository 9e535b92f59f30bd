//! Reductions.

use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, Var};
use crate::context::Cx;
use memopt_core::{Tensor, kernels};

/// What a reduction did, for its backward.
#[derive(Clone, Copy)]
enum Reduced {
    All { mean: bool },
    Dim { dim: usize, mean: bool },
}

struct ReduceBackward {
    how: Reduced,
    input_dims: Vec<usize>,
}

impl Backward<1> for ReduceBackward {
    fn name(&self) -> &'static str {
        "reduce"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        let grad = g.single_output()?;
        let gx = match self.how {
            Reduced::All { mean } => {
                let n = self.input_dims.iter().product::<usize>().max(1);
                let s = if mean { 1.0 / n as f32 } else { 1.0 };
                kernels::broadcast_scalar(&grad, &self.input_dims, s)?
            }
            Reduced::Dim { dim, mean } => {
                let n = self.input_dims[dim];
                let s = if mean { 1.0 / n.max(1) as f32 } else { 1.0 };
                kernels::broadcast_dim(&grad, dim, n, s)?
            }
        };
        Ok([Some(gx)])
    }
}

fn reduce<'m>(cx: &mut Cx<'m>, x: &Var, how: Reduced) -> Result<Var> {
    let xt = x.tensor()?;
    let y = match how {
        Reduced::All { mean: false } => kernels::sum_all(&xt)?,
        Reduced::All { mean: true } => kernels::mean_all(&xt)?,
        Reduced::Dim { dim, mean: false } => kernels::sum_dim(&xt, dim)?,
        Reduced::Dim { dim, mean: true } => kernels::mean_dim(&xt, dim)?,
    };
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = ReduceBackward {
        how,
        input_dims: x.dims().to_vec(),
    };
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

/// Sum of all elements (a scalar).
pub fn sum_all<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    reduce(cx, x, Reduced::All { mean: false })
}

/// Mean of all elements (a scalar).
pub fn mean_all<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    reduce(cx, x, Reduced::All { mean: true })
}

/// Sum over dimension `dim` (removed).
pub fn sum_dim<'m>(cx: &mut Cx<'m>, x: &Var, dim: usize) -> Result<Var> {
    reduce(cx, x, Reduced::Dim { dim, mean: false })
}

/// Mean over dimension `dim` (removed), e.g. firing rates over time with `dim = 0`.
pub fn mean_dim<'m>(cx: &mut Cx<'m>, x: &Var, dim: usize) -> Result<Var> {
    reduce(cx, x, Reduced::Dim { dim, mean: true })
}
