//! Layer inputs read one time step at a time.
//!
//! A layer whose batch folds `T` time steps (`[T*N, ...]`) runs one GEMM group per time step
//! (the `time_steps` argument of [`super::conv2d`] and [`super::linear`]), so its kernels never
//! need more than one step of the input at once. A [`StepInput`] is an f32 input that exists
//! only in another form (a bit-packed spike tensor, in memopt-compress) and writes one step's
//! values into the kernel's one-step buffer on demand: [`super::conv2d_stepwise`],
//! [`super::linear_stepwise`] and their backwards read it that way, so the whole f32 input never
//! exists. Their results are bit-identical to the dense kernels' on the same values: the GEMMs
//! have the same shapes, read the same values and run in the same order.

use crate::{CoreError, Device, KernelBuffer, Result, Shape, Tensor};
use std::iter::Rev;
use std::ops::Range;

/// An f32 input that is not held as a tensor: kernels ask it for one span of its values
/// (row-major) at a time, written into a buffer they allocated.
pub trait StepInput {
    /// Shape of the whole input.
    fn shape(&self) -> &Shape;

    /// The device the input lives on; the kernel's buffers are allocated there.
    fn device(&self) -> Device;

    /// Writes values `first .. first + dst.len()` of the input (row-major) into `dst`, through
    /// the device's backend: computed on the CPU or a GPU, nothing on Meta. Allocates nothing
    /// (so a Meta step allocates exactly what the CPU does). `op` names the kernel in errors.
    fn write_span(&self, op: &'static str, first: usize, dst: &mut KernelBuffer<f32>) -> Result<()>;
}

/// The time steps `0..time_steps` a stepwise kernel visits on `device`, in forward order: all
/// of them where data is computed; on Meta only the first. A step allocates nothing (the
/// one-step buffer is allocated before the loop, [`StepInput::write_span`] and the compute
/// allocate nothing) and its checks are the first step's, so a Meta run allocates and fails as a
/// CPU one does, in time independent of `T`.
pub(crate) fn steps_first_to_last(device: Device, time_steps: usize) -> Range<usize> {
    if device.is_meta() {
        0..time_steps.min(1)
    } else {
        0..time_steps
    }
}

/// [`steps_first_to_last`] in backward order: `T-1` first; on Meta only `T-1`.
pub(crate) fn steps_last_to_first(device: Device, time_steps: usize) -> Rev<Range<usize>> {
    if device.is_meta() {
        (time_steps.saturating_sub(1)..time_steps).rev()
    } else {
        (0..time_steps).rev()
    }
}

/// Checks that `x` lives on `w`'s device.
pub(crate) fn check_step_device(op: &'static str, x: &dyn StepInput, w: &Tensor) -> Result<()> {
    if x.device() == w.device() {
        return Ok(());
    }
    Err(CoreError::DeviceMismatch {
        op,
        a: x.device(),
        b: w.device(),
    })
}

/// A dense tensor read as a [`StepInput`] (the reference the stepwise kernels are tested
/// against: they must give what the dense kernels give).
#[cfg(test)]
pub(crate) struct DenseSteps<'a>(pub &'a Tensor);

#[cfg(test)]
impl StepInput for DenseSteps<'_> {
    fn shape(&self) -> &Shape {
        self.0.shape()
    }

    fn device(&self) -> Device {
        self.0.device()
    }

    fn write_span(&self, op: &'static str, first: usize, dst: &mut KernelBuffer<f32>) -> Result<()> {
        let src = self.0.read::<f32>(op)?;
        crate::backend::launch(op, self.0.device(), || {
            let len = dst.len();
            dst.host_mut()?.copy_from_slice(&src.host()?[first..first + len]);
            Ok(())
        })
    }
}
