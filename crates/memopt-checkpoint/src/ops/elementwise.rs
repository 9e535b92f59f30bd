//! Elementwise ops.

use super::single_grad;
use crate::Result;
use crate::autograd::{BackwardGrads, BackwardOp, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::{Tensor, kernels};

/// `a + b` (same shapes). Saves nothing.
pub fn add<'m>(cx: &mut Cx<'m>, a: &Var, b: &Var) -> Result<Var> {
    let y = kernels::add(a.tensor(), b.tensor())?;
    if !cx.needs_grad(&[a, b]) {
        return Ok(Var::constant(y));
    }
    Ok(cx.record1(AddBackward, &[a, b], y))
}

struct AddBackward;

impl<'m> BackwardOp<'m> for AddBackward {
    fn name(&self) -> &'static str {
        "add"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        // Both operands share one gradient tensor; the tape never accumulates in place into a
        // shared tensor, so no copy is needed.
        let grad = single_grad(&g)?;
        Ok(vec![
            g.input_needs[0].then(|| grad.clone()),
            g.input_needs[1].then_some(grad),
        ])
    }
}

/// `a * b` (same shapes). Saves both operands.
pub fn mul<'m>(cx: &mut Cx<'m>, a: &Var, b: &Var) -> Result<Var> {
    let y = kernels::mul(a.tensor(), b.tensor())?;
    if !cx.needs_grad(&[a, b]) {
        return Ok(Var::constant(y));
    }
    let op = MulBackward {
        a: cx.save(a.tensor()),
        b: cx.save(b.tensor()),
    };
    Ok(cx.record1(op, &[a, b], y))
}

struct MulBackward {
    a: SavedTensor,
    b: SavedTensor,
}

impl<'m> BackwardOp<'m> for MulBackward {
    fn name(&self) -> &'static str {
        "mul"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        let grad = single_grad(&g)?;
        let ga = if g.input_needs[0] {
            Some(kernels::mul_backward(&grad, self.b.tensor())?)
        } else {
            None
        };
        let gb = if g.input_needs[1] {
            Some(kernels::mul_backward(&grad, self.a.tensor())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    }
}

/// `x * s`. Saves nothing.
pub fn scale<'m>(cx: &mut Cx<'m>, x: &Var, s: f32) -> Result<Var> {
    let y = kernels::scale(x.tensor(), s)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    Ok(cx.record1(ScaleBackward(s), &[x], y))
}

struct ScaleBackward(f32);

impl<'m> BackwardOp<'m> for ScaleBackward {
    fn name(&self) -> &'static str {
        "scale"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(kernels::scale_backward(&single_grad(&g)?, self.0)?)])
    }
}

/// `max(x, 0)`. Saves its output.
pub fn relu<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    let y = kernels::relu(x.tensor())?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = ReluBackward(cx.save(&y));
    Ok(cx.record1(op, &[x], y))
}

struct ReluBackward(SavedTensor);

impl<'m> BackwardOp<'m> for ReluBackward {
    fn name(&self) -> &'static str {
        "relu"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(kernels::relu_backward(
            &single_grad(&g)?,
            self.0.tensor(),
        )?)])
    }
}

/// The logistic function. Saves its output.
pub fn sigmoid<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    let y = kernels::sigmoid(x.tensor())?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = SigmoidBackward(cx.save(&y));
    Ok(cx.record1(op, &[x], y))
}

struct SigmoidBackward(SavedTensor);

impl<'m> BackwardOp<'m> for SigmoidBackward {
    fn name(&self) -> &'static str {
        "sigmoid"
    }
    fn backward(self: Box<Self>, _cx: &mut Cx<'m>, g: BackwardGrads) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(kernels::sigmoid_backward(
            &single_grad(&g)?,
            self.0.tensor(),
        )?)])
    }
}
