//! Elementwise kernels: add, mul, scale, relu, sigmoid, and their backward functions, plus
//! in-place gradient accumulation.

use super::Operand;
use super::par::{map1, map2, update2};
use crate::backend::{Compute, CudaBackend, Init, compute};
use crate::cuda::launchers::elementwise as gpu_k;
use crate::cuda::{CudaPtr, grid_for};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};

/// The CUDA half of a binary op: a launcher taking `(gpu, grid, a, b, out, n)`.
type BinaryCuda = fn(CudaBackend, crate::cuda::LaunchConfig, CudaPtr, CudaPtr, CudaPtr, u64) -> Result<()>;

fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    a.expect_same_device(op, b)?;
    if a.shape() != b.shape() {
        return Err(CoreError::shape(
            op,
            format!("both operands of shape {}", a.shape()),
            b.shape(),
        ));
    }
    Ok(())
}

fn unary(
    op: &'static str,
    x: &Tensor,
    kind: MemoryKind,
    spike: bool,
    f: impl Fn(f32) -> f32 + Sync,
    cuda: impl FnOnce(CudaBackend, CudaPtr, CudaPtr, u64) -> Result<()>,
) -> Result<Tensor> {
    let xr = x.read::<f32>(op)?;
    let n = x.elem_count();
    let mut out = KernelBuffer::<f32>::new(op, x.device(), n, kind, Init::Overwritten)?;
    compute(x.device(), |backend| match backend {
        Compute::Cpu => {
            map1(xr.host()?, out.host_mut()?, f);
            Ok(())
        }
        Compute::Cuda(_) if n == 0 => Ok(()),
        Compute::Cuda(gpu) => cuda(gpu, xr.cuda_ptr()?, out.cuda_ptr()?, n as u64),
    })?;
    Ok(out.into_tensor(x.shape().clone())?.with_spike_flag(spike))
}

fn binary(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    kind: MemoryKind,
    spike: bool,
    f: impl Fn(f32, f32) -> f32 + Sync,
    cuda: BinaryCuda,
) -> Result<Tensor> {
    same_shape(op, a, b)?;
    let (ar, br) = (a.read::<f32>(op)?, b.read::<f32>(op)?);
    let n = a.elem_count();
    let mut out = KernelBuffer::<f32>::new(op, a.device(), n, kind, Init::Overwritten)?;
    compute(a.device(), |backend| match backend {
        Compute::Cpu => {
            map2(ar.host()?, br.host()?, out.host_mut()?, f);
            Ok(())
        }
        Compute::Cuda(_) if n == 0 => Ok(()),
        Compute::Cuda(gpu) => {
            let (pa, pb, po) = (ar.cuda_ptr()?, br.cuda_ptr()?, out.cuda_ptr()?);
            cuda(gpu, grid_for(n as u64), pa, pb, po, n as u64)
        }
    })?;
    Ok(out.into_tensor(a.shape().clone())?.with_spike_flag(spike))
}

/// `a + b` (same shapes). The sum of spikes is not a spike tensor (it may hold 2).
///
/// Each operand is lent (`&a`) or handed over (`a`, see [`Operand`]): a handed-over operand that
/// is reusable receives the sum in place (`a` first, then `b`) and no buffer is allocated; the
/// sum is computed as `a + b` either way, so results are bit-identical.
pub fn add<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Result<Tensor> {
    const OP: &str = "add";
    let (a, b) = (a.into(), b.into());
    match (a.reusable(), b.reusable()) {
        (true, _) => add_over(a, b.tensor(), true),
        (false, true) => add_over(b, a.tensor(), false),
        (false, false) => binary(
            OP,
            a.tensor(),
            b.tensor(),
            MemoryKind::Activation,
            false,
            |x, y| x + y,
            gpu_k::ew_add,
        ),
    }
}

/// `a + b` written over the reusable operand `dst` (`a` when `dst_is_a`, else `b`); `other` is
/// the other operand. `dst` is the only handle to its storage, so `other` cannot share it.
fn add_over(dst: Operand<'_>, other: &Tensor, dst_is_a: bool) -> Result<Tensor> {
    const OP: &str = "add";
    same_shape(OP, dst.tensor(), other)?;
    let Some(dst) = dst.into_given() else {
        return Err(CoreError::invalid(
            OP,
            "only a handed-over operand can hold the sum",
        ));
    };
    let or = other.read::<f32>(OP)?;
    let mut w = dst.write::<f32>(OP)?;
    let n = dst.elem_count() as u64;
    compute(dst.device(), |backend| match backend {
        Compute::Cpu if dst_is_a => {
            update2(w.host_mut()?, or.host()?, |a, b| a + b);
            Ok(())
        }
        Compute::Cpu => {
            update2(w.host_mut()?, or.host()?, |b, a| a + b);
            Ok(())
        }
        Compute::Cuda(_) if n == 0 => Ok(()),
        // Each thread reads both operands at index i before writing index i: in place is safe.
        Compute::Cuda(gpu) => {
            let (d, o) = (w.cuda_ptr()?, or.cuda_ptr()?);
            let (pa, pb) = if dst_is_a { (d, o) } else { (o, d) };
            gpu_k::ew_add(gpu, grid_for(n), pa, pb, d, n)
        }
    })?;
    drop((or, w));
    if dst.kind() != MemoryKind::Activation {
        dst.set_kind(MemoryKind::Activation);
    }
    Ok(dst.with_spike_flag(false))
}

/// `a * b` (same shapes). The product of two spike tensors is a spike tensor.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(
        "mul",
        a,
        b,
        MemoryKind::Activation,
        a.is_spike() && b.is_spike(),
        |x, y| x * y,
        gpu_k::ew_mul,
    )
}

/// `x * s`.
pub fn scale(x: &Tensor, s: f32) -> Result<Tensor> {
    unary(
        "scale",
        x,
        MemoryKind::Activation,
        x.is_spike() && s == 1.0,
        move |v| v * s,
        move |gpu, x, out, n| gpu_k::ew_scale(gpu, grid_for(n), x, s, out, n),
    )
}

/// `max(x, 0)`. Keeps the spike flag.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    unary(
        "relu",
        x,
        MemoryKind::Activation,
        x.is_spike(),
        |v| v.max(0.0),
        |gpu, x, out, n| gpu_k::ew_relu(gpu, grid_for(n), x, out, n),
    )
}

/// `1 / (1 + exp(-x))`.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    unary(
        "sigmoid",
        x,
        MemoryKind::Activation,
        false,
        sigmoid_f32,
        |gpu, x, out, n| gpu_k::ew_sigmoid(gpu, grid_for(n), x, out, n),
    )
}

/// The logistic function on one value.
#[inline]
pub fn sigmoid_f32(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// `grad * s`: the backward of [`scale`], recorded as a gradient.
pub fn scale_backward(grad: &Tensor, s: f32) -> Result<Tensor> {
    unary(
        "scale_backward",
        grad,
        MemoryKind::Gradient,
        false,
        move |g| g * s,
        move |gpu, g, out, n| gpu_k::ew_scale(gpu, grid_for(n), g, s, out, n),
    )
}

/// `grad * other`: the backward of [`mul`] with respect to one operand.
pub fn mul_backward(grad: &Tensor, other: &Tensor) -> Result<Tensor> {
    binary(
        "mul_backward",
        grad,
        other,
        MemoryKind::Gradient,
        false,
        |g, o| g * o,
        gpu_k::ew_mul,
    )
}

/// Backward of [`relu`] given its input `x` (or, equally, its output).
pub fn relu_backward(grad: &Tensor, x: &Tensor) -> Result<Tensor> {
    binary(
        "relu_backward",
        grad,
        x,
        MemoryKind::Gradient,
        false,
        |g, v| if v > 0.0 { g } else { 0.0 },
        gpu_k::ew_relu_backward,
    )
}

/// Backward of [`sigmoid`] given its output `y`: `grad * y * (1 - y)`.
pub fn sigmoid_backward(grad: &Tensor, y: &Tensor) -> Result<Tensor> {
    binary(
        "sigmoid_backward",
        grad,
        y,
        MemoryKind::Gradient,
        false,
        |g, s| g * s * (1.0 - s),
        gpu_k::ew_sigmoid_backward,
    )
}

/// `acc += x` in place (gradient accumulation without allocation).
pub fn add_assign(acc: &Tensor, x: &Tensor) -> Result<()> {
    const OP: &str = "add_assign";
    same_shape(OP, acc, x)?;
    if acc.same_storage(x) {
        return Err(CoreError::invalid(
            OP,
            "the accumulator and the addend share storage; copy one first",
        ));
    }
    let xr = x.read::<f32>(OP)?;
    let mut w = acc.write::<f32>(OP)?;
    let n = acc.elem_count() as u64;
    compute(acc.device(), |backend| match backend {
        Compute::Cpu => {
            update2(w.host_mut()?, xr.host()?, |a, b| a + b);
            Ok(())
        }
        Compute::Cuda(_) if n == 0 => Ok(()),
        Compute::Cuda(gpu) => gpu_k::ew_add_assign(gpu, grid_for(n), w.cuda_ptr()?, xr.cuda_ptr()?, n),
    })
}

/// `dst = src` in place (same shapes): writes a chunk's result into its time slice of a
/// preallocated tensor, e.g. `assign(&full.narrow0(t0, len)?, &chunk)`.
pub fn assign(dst: &Tensor, src: &Tensor) -> Result<()> {
    const OP: &str = "assign";
    same_shape(OP, dst, src)?;
    if dst.same_storage(src) {
        return Err(CoreError::invalid(OP, "source and destination share storage"));
    }
    let sr = src.read::<f32>(OP)?;
    let mut w = dst.write::<f32>(OP)?;
    let n = dst.elem_count() as u64;
    compute(dst.device(), |backend| match backend {
        Compute::Cpu => {
            update2(w.host_mut()?, sr.host()?, |_, b| b);
            Ok(())
        }
        Compute::Cuda(_) if n == 0 => Ok(()),
        Compute::Cuda(gpu) => gpu_k::ew_assign(gpu, grid_for(n), w.cuda_ptr()?, sr.cuda_ptr()?, n),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_vec(v.to_vec(), [v.len()], Device::Cpu, MemoryKind::Input).unwrap()
    }

    #[test]
    fn forward_values_and_flags() {
        let a = t(&[-1.0, 0.0, 2.0]);
        let b = t(&[1.0, 1.0, 0.0]).with_spike_flag(true);
        assert_eq!(add(&a, &b).unwrap().to_vec_f32().unwrap(), vec![0.0, 1.0, 2.0]);
        assert_eq!(relu(&a).unwrap().to_vec_f32().unwrap(), vec![0.0, 0.0, 2.0]);
        assert!(mul(&b, &b).unwrap().is_spike());
        assert!(!add(&b, &b).unwrap().is_spike());
        let s = sigmoid(&a).unwrap().to_vec_f32().unwrap();
        assert!((s[1] - 0.5).abs() < 1e-7);
    }

    #[test]
    fn shape_and_dtype_errors_name_the_problem() {
        let a = t(&[1.0, 2.0]);
        let b = t(&[1.0, 2.0, 3.0]);
        let e = add(&a, &b).unwrap_err().to_string();
        assert!(e.contains("add") && e.contains("[2]") && e.contains("[3]"), "{e}");
        let h = a.to_dtype(crate::DType::F16).unwrap();
        let e = relu(&h).unwrap_err().to_string();
        assert!(e.contains("expected dtype f32, got f16"), "{e}");
    }

    #[test]
    fn accumulate_in_place() {
        let acc = t(&[1.0, 2.0]);
        add_assign(&acc, &t(&[0.5, 0.5])).unwrap();
        assert_eq!(acc.to_vec_f32().unwrap(), vec![1.5, 2.5]);
        assert!(add_assign(&acc, &acc).is_err());
    }

    #[test]
    fn assign_writes_a_time_slice() {
        let full = Tensor::zeros([3, 2], crate::DType::F32, Device::Cpu, MemoryKind::Activation).unwrap();
        let part = Tensor::from_vec(
            vec![1.0f32, 2.0, 3.0, 4.0],
            [2, 2],
            Device::Cpu,
            MemoryKind::Input,
        )
        .unwrap();
        assign(&full.narrow0(1, 2).unwrap(), &part).unwrap();
        assert_eq!(full.to_vec_f32().unwrap(), vec![0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        assert!(assign(&full.narrow0(0, 1).unwrap(), &part).is_err());
    }
}
