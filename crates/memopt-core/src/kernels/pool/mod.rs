//! 2-D pooling over `x` of shape `[B, C, H, W]` with PyTorch's semantics (floor mode, no
//! dilation): max pooling with argmax indices, average pooling, adaptive average pooling, and
//! their backward functions.
//!
//! Each of the `B * C` planes is independent; kernels run in parallel over planes and serially
//! within a plane, so results (including the order of gradient accumulation where windows
//! overlap) do not depend on the number of threads.

mod adaptive;
mod avg;
mod max;
#[cfg(test)]
mod tests;

pub use adaptive::{adaptive_avg_pool2d, adaptive_avg_pool2d_backward};
pub use avg::{avg_pool2d, avg_pool2d_backward};
pub use max::{max_pool2d, max_pool2d_backward};

use crate::{CoreError, Result, Tensor};

/// Kernel size, stride and zero padding of a 2-D pooling, as `[height, width]` in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pool2dParams {
    /// Window size `[kh, kw]`, at least 1.
    pub kernel: [usize; 2],
    /// Step between windows `[sh, sw]`, at least 1.
    pub stride: [usize; 2],
    /// Implicit padding on each side `[ph, pw]`, at most half the kernel (as PyTorch requires).
    pub padding: [usize; 2],
}

impl Pool2dParams {
    /// Output `[oh, ow]` for an input plane of `[h, w]` (floor mode:
    /// `(h + 2 * ph - kh) / sh + 1`), after checking the parameters.
    pub fn output_hw(&self, input_hw: [usize; 2]) -> Result<[usize; 2]> {
        self.check("pool2d", input_hw)
    }

    fn check(&self, op: &'static str, [h, w]: [usize; 2]) -> Result<[usize; 2]> {
        let mut out = [0; 2];
        for (i, (axis, n)) in [("height", h), ("width", w)].into_iter().enumerate() {
            let (k, s, p) = (self.kernel[i], self.stride[i], self.padding[i]);
            if k == 0 || s == 0 {
                return Err(CoreError::invalid(
                    op,
                    format!(
                        "kernel and stride must be at least 1, got kernel {:?} and stride {:?}",
                        self.kernel, self.stride
                    ),
                ));
            }
            if p > k / 2 {
                return Err(CoreError::invalid(
                    op,
                    format!(
                        "padding {p} along the {axis} is more than half the kernel size {k}; valid padding is 0..={}",
                        k / 2
                    ),
                ));
            }
            if n + 2 * p < k {
                return Err(CoreError::invalid(
                    op,
                    format!("the input {axis} {n} plus padding 2*{p} is smaller than the kernel size {k}"),
                ));
            }
            out[i] = (n + 2 * p - k) / s + 1;
        }
        Ok(out)
    }
}

/// The `[B, C, H, W]` geometry of a pooling and its output plane size.
#[derive(Debug, Clone, Copy)]
struct Geom {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
}

impl Geom {
    /// Checks that `dims` is `[B, C, H, W]` with non-empty planes; the output size is set later.
    fn input(op: &'static str, dims: &[usize]) -> Result<Geom> {
        match *dims {
            [b, c, h, w] if h > 0 && w > 0 => Ok(Geom {
                b,
                c,
                h,
                w,
                oh: 0,
                ow: 0,
            }),
            _ => Err(CoreError::shape(
                op,
                "an input of shape [B, C, H, W] with H, W >= 1",
                crate::Shape::from(dims),
            )),
        }
    }

    /// Geometry of a pooling with `p` over `dims`.
    fn pooled(op: &'static str, dims: &[usize], p: &Pool2dParams) -> Result<Geom> {
        let g = Geom::input(op, dims)?;
        let [oh, ow] = p.check(op, [g.h, g.w])?;
        Ok(Geom { oh, ow, ..g })
    }

    fn in_plane(self) -> usize {
        self.h * self.w
    }

    fn out_plane(self) -> usize {
        self.oh * self.ow
    }

    fn in_dims(self) -> [usize; 4] {
        [self.b, self.c, self.h, self.w]
    }

    fn out_dims(self) -> [usize; 4] {
        [self.b, self.c, self.oh, self.ow]
    }

    /// Planes per parallel task (at least 4096 input elements per task).
    fn min_planes(self) -> usize {
        (4096 / self.in_plane().max(1)).max(1)
    }

    /// The geometry as the CUDA kernels take it, with the window of `p` (unit window for the
    /// adaptive pools, which take their sizes directly).
    fn cuda(self, p: &Pool2dParams) -> crate::cuda::PoolGeom {
        let ([kh, kw], [sh, sw], [ph, pw]) = (p.kernel, p.stride, p.padding);
        crate::cuda::PoolGeom {
            planes: (self.b * self.c) as u64,
            h: self.h as u64,
            w: self.w as u64,
            oh: self.oh as u64,
            ow: self.ow as u64,
            // Window sizes are bounded by the input plus padding (checked), far below i64::MAX.
            kh: kh as i64,
            kw: kw as i64,
            sh: sh as i64,
            sw: sw as i64,
            ph: ph as i64,
            pw: pw as i64,
        }
    }

    /// Checks that `grad_y` has this geometry's output shape.
    fn expect_out(self, op: &'static str, grad_y: &Tensor) -> Result<()> {
        let want = self.out_dims();
        if grad_y.dims() == want {
            Ok(())
        } else {
            Err(CoreError::shape(
                op,
                format!(
                    "grad_y of the pooled shape {} for input {}",
                    crate::Shape::from(want),
                    crate::Shape::from(self.in_dims())
                ),
                grad_y.shape(),
            ))
        }
    }
}

/// The window of output position `o` along one axis of length `n`: `(lo, hi, padded_len)`, with
/// `lo..hi` the in-bounds input positions and `padded_len` the window length clipped to the
/// padded input (PyTorch's divisor when padding counts).
#[inline]
fn window(o: usize, k: usize, s: usize, p: usize, n: usize) -> (usize, usize, usize) {
    let start = (o * s) as isize - p as isize;
    let end_padded = (start + k as isize).min((n + p) as isize);
    let lo = start.max(0) as usize;
    let hi = (start + k as isize).min(n as isize) as usize;
    (lo, hi, (end_padded - start) as usize)
}
