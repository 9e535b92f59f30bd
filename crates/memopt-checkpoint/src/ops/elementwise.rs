//! Elementwise ops.

use crate::Result;
use crate::autograd::{
    Backward, BackwardGrads, Gradients, InputSlot, Record, SavedLayerInput, SavedTensor, Var, VarArg,
};
use crate::context::Cx;
use memopt_compress::PackedSpikes;
use memopt_core::{CoreError, DType, MemoryKind, Tensor, kernels};

/// `a + b` (same shapes). Saves nothing. Each operand is lent (`&a`) or handed over (`a`, see
/// [`VarArg`]): a handed-over operand nothing else holds receives the sum in place. When the sum
/// is read by no one ([`Cx::take_output_unread`]) and the op records its backward, nothing is
/// computed: the sum is an unmaterialised stand-in. When one operand holds bit-packed spikes (a
/// residual identity inside a recomputed block), they are unpacked one entry of dimension 0 (one
/// time step of `[T, ...]`) at a time, so their f32 form never exists whole.
pub fn add<'m, 'a, 'b>(cx: &mut Cx<'m>, a: impl Into<VarArg<'a>>, b: impl Into<VarArg<'b>>) -> Result<Var> {
    let (a, b) = (a.into(), b.into());
    let needs_grad = cx.needs_grad(&[a.var(), b.var()]);
    let unread = cx.take_output_unread() && needs_grad;
    let ids = [a.var().id(), b.var().id()];
    let (av, bv) = (a.var(), b.var());
    let valid = av.shape() == bv.shape() && av.dtype() == bv.dtype() && av.device() == bv.device();
    let y = if unread && valid && av.dtype() == DType::F32 {
        Tensor::unmaterialised(av.shape().clone(), DType::F32, av.device())?
    } else {
        match (av.as_packed(), bv.as_packed()) {
            (None, Some(spikes)) => add_packed(&*av.tensor()?, spikes)?,
            // IEEE addition is commutative: `spikes + b` and `b + spikes` are the same numbers.
            (Some(spikes), None) => add_packed(&*bv.tensor()?, spikes)?,
            _ => kernels::add(a.into_operand()?, b.into_operand()?)?,
        }
    };
    Ok(cx.record(Record::from_ids(AddBackward, ids), y))
}

/// `dense + spikes`, as [`kernels::add`] computes it: a copy of `dense` to which each entry of
/// dimension 0 of the spikes is added, unpacked just before.
fn add_packed(dense: &Tensor, spikes: &PackedSpikes) -> Result<Tensor> {
    if dense.dims() != spikes.dims() {
        return Err(CoreError::shape(
            "add",
            format!("operands of the same shape (the first is {})", dense.shape()),
            spikes.shape(),
        )
        .into());
    }
    let y = kernels::copy_as(dense, MemoryKind::Activation)?.with_spike_flag(false);
    match dense.dims().first() {
        None => kernels::add_assign(&y, &spikes.unpack()?)?,
        Some(&d0) => {
            for i in 0..d0 {
                kernels::add_assign(&y.narrow0(i, 1)?, &spikes.narrow0(i, 1)?.unpack()?)?;
            }
        }
    }
    Ok(y)
}

struct AddBackward;

impl Backward<2> for AddBackward {
    fn name(&self) -> &'static str {
        "add"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 2]>,
    ) -> Result<[Option<Tensor>; 2]> {
        // Both operands share one gradient tensor; the tape never accumulates in place into a
        // shared tensor, so no copy is needed.
        let grad = g.single_output()?;
        let [a, b] = g.inputs;
        Ok([a.needs_grad.then(|| grad.clone()), b.needs_grad.then_some(grad)])
    }
}

/// `a * b` (same shapes). Saves both operands; spike operands are kept bit-packed where
/// packed saves are on (the spike-driven attention's `K * V` under
/// [`crate::Policy::StorePacked`]).
pub fn mul<'m>(cx: &mut Cx<'m>, a: &Var, b: &Var) -> Result<Var> {
    let y = kernels::mul(&*a.tensor()?, &*b.tensor()?)?;
    if !cx.needs_grad(&[a, b]) {
        return Ok(Var::constant(y));
    }
    let op = MulBackward {
        a: cx.save_layer_input(a)?,
        b: cx.save_layer_input(b)?,
    };
    Ok(cx.record(Record::new(op, [Some(a), Some(b)]), y))
}

struct MulBackward {
    a: SavedLayerInput,
    b: SavedLayerInput,
}

impl Backward<2> for MulBackward {
    fn name(&self) -> &'static str {
        "mul"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 2]>,
    ) -> Result<[Option<Tensor>; 2]> {
        let grad = g.single_output()?;
        let [a, b] = g.inputs;
        let ga = if a.needs_grad {
            Some(kernels::mul_backward(&grad, &*self.b.whole()?)?)
        } else {
            None
        };
        let gb = if b.needs_grad {
            Some(kernels::mul_backward(&grad, &*self.a.whole()?)?)
        } else {
            None
        };
        Ok([ga, gb])
    }
}

/// `x * s`. Saves nothing.
pub fn scale<'m>(cx: &mut Cx<'m>, x: &Var, s: f32) -> Result<Var> {
    let y = kernels::scale(&*x.tensor()?, s)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    Ok(cx.record(Record::new(ScaleBackward(s), [Some(x)]), y))
}

struct ScaleBackward(f32);

impl Backward<1> for ScaleBackward {
    fn name(&self) -> &'static str {
        "scale"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        Ok([Some(kernels::scale_backward(&g.single_output()?, self.0)?)])
    }
}

/// `max(x, 0)`. Saves its output.
pub fn relu<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    let y = kernels::relu(&*x.tensor()?)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = ReluBackward(cx.save(&y));
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct ReluBackward(SavedTensor);

impl Backward<1> for ReluBackward {
    fn name(&self) -> &'static str {
        "relu"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        Ok([Some(kernels::relu_backward(
            &g.single_output()?,
            self.0.tensor(),
        )?)])
    }
}

/// The logistic function. Saves its output.
pub fn sigmoid<'m>(cx: &mut Cx<'m>, x: &Var) -> Result<Var> {
    let y = kernels::sigmoid(&*x.tensor()?)?;
    if !cx.needs_grad(&[x]) {
        return Ok(Var::constant(y));
    }
    let op = SigmoidBackward(cx.save(&y));
    Ok(cx.record(Record::new(op, [Some(x)]), y))
}

struct SigmoidBackward(SavedTensor);

impl Backward<1> for SigmoidBackward {
    fn name(&self) -> &'static str {
        "sigmoid"
    }
    fn backward(
        self,
        _params: &mut Gradients,
        g: BackwardGrads<[InputSlot; 1]>,
    ) -> Result<[Option<Tensor>; 1]> {
        Ok([Some(kernels::sigmoid_backward(
            &g.single_output()?,
            self.0.tensor(),
        )?)])
    }
}
