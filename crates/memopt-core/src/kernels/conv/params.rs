//! Convolution hyper-parameters and the geometry (all derived sizes) of one conv2d call.

use crate::{CoreError, Device, Result, Shape, Tensor};
use serde::{Deserialize, Serialize};

/// Output columns (images x output pixels) that one im2col chunk aims for on the CPU: images with
/// fewer output pixels are batched until a chunk reaches this many columns, so that each GEMM is
/// wide enough to run near peak. Each target has its own ([`crate::Target::conv_chunk_columns`]), a
/// constant, so the workspace depends on shapes and the target only.
#[cfg(test)]
pub(crate) const TARGET_COLS: usize = crate::Target::Cpu.conv_chunk_columns();

/// Hyper-parameters of a 2-d convolution, as in PyTorch's `nn.Conv2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conv2dParams {
    /// Step between output pixels along (height, width), in input pixels; at least 1.
    pub stride: [usize; 2],
    /// Zeros added on both sides of (height, width), in pixels.
    pub padding: [usize; 2],
    /// Spacing between kernel taps along (height, width), in input pixels; at least 1.
    pub dilation: [usize; 2],
    /// Number of channel groups; divides both the input and the output channels.
    pub groups: usize,
}

impl Default for Conv2dParams {
    /// Stride 1, no padding, dilation 1, one group.
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

impl Conv2dParams {
    /// Checks that stride, dilation and groups are positive.
    pub(crate) fn validate(&self, op: &'static str) -> Result<()> {
        if self.stride.contains(&0) {
            return Err(CoreError::invalid(
                op,
                format!("stride {:?} has a zero; every stride must be >= 1", self.stride),
            ));
        }
        if self.dilation.contains(&0) {
            return Err(CoreError::invalid(
                op,
                format!(
                    "dilation {:?} has a zero; every dilation must be >= 1",
                    self.dilation
                ),
            ));
        }
        if self.groups == 0 {
            return Err(CoreError::invalid(op, "groups is 0; it must be >= 1"));
        }
        Ok(())
    }

    /// Output `[height, width]` (pixels) for an input of `h x w` pixels and a `kh x kw` kernel.
    /// Fails when a parameter is zero or the dilated kernel is larger than the padded input.
    pub fn output_hw(&self, h: usize, w: usize, kh: usize, kw: usize) -> Result<[usize; 2]> {
        self.output_hw_for("conv2d", h, w, kh, kw)
    }

    pub(crate) fn output_hw_for(
        &self,
        op: &'static str,
        h: usize,
        w: usize,
        kh: usize,
        kw: usize,
    ) -> Result<[usize; 2]> {
        self.validate(op)?;
        let mut out = [0; 2];
        for (d, (name, size, k)) in [("height", h, kh), ("width", w, kw)].into_iter().enumerate() {
            if k == 0 {
                return Err(CoreError::invalid(
                    op,
                    format!("kernel {name} is 0; it must be >= 1"),
                ));
            }
            let extent = (k - 1)
                .checked_mul(self.dilation[d])
                .and_then(|e| e.checked_add(1));
            let padded = self.padding[d].checked_mul(2).and_then(|p| p.checked_add(size));
            let (Some(extent), Some(padded)) = (extent, padded) else {
                return Err(CoreError::invalid(
                    op,
                    format!("kernel, dilation or padding along the {name} overflows usize"),
                ));
            };
            if extent > padded {
                return Err(CoreError::invalid(
                    op,
                    format!(
                        "kernel {name} {k} with dilation {} spans {extent} pixels, more than the \
                         padded input {name} {size} + 2 x {} = {padded}; use a smaller kernel or \
                         dilation, or more padding",
                        self.dilation[d], self.padding[d]
                    ),
                ));
            }
            out[d] = (padded - extent) / self.stride[d] + 1;
        }
        Ok(out)
    }
}

/// Every size of one conv2d call, validated: input `[b, c, h, w]`, weight `[co, cg, kh, kw]`,
/// output `[b, co, ho, wo]`, with `cg = c / groups` and `cog = co / groups`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvGeom {
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub co: usize,
    pub kh: usize,
    pub kw: usize,
    pub groups: usize,
    pub cg: usize,
    pub cog: usize,
    pub ho: usize,
    pub wo: usize,
    pub p: Conv2dParams,
    /// Columns one im2col chunk aims for, the target's [`crate::Target::conv_chunk_columns`].
    chunk_columns: usize,
    /// Whether the target runs one-group convolutions as an implicit GEMM
    /// ([`crate::Target::conv_implicit_gemm`]).
    implicit_gemm: bool,
    out_len: usize,
    col_len: usize,
    stage_len: usize,
}

impl ConvGeom {
    /// Validates the ranks and sizes of `x` and `w` against `p` (dtypes and devices are checked
    /// by the caller).
    pub fn new(op: &'static str, x: &Tensor, w: &Tensor, p: &Conv2dParams) -> Result<Self> {
        Self::for_input(op, x.shape(), x.device(), w, p)
    }

    /// [`ConvGeom::new`] for an input of shape `x` on `device` that is not a tensor (a
    /// [`crate::kernels::StepInput`]).
    pub fn for_input(
        op: &'static str,
        x: &Shape,
        device: Device,
        w: &Tensor,
        p: &Conv2dParams,
    ) -> Result<Self> {
        p.validate(op)?;
        let &[b, c, h, wd] = x.dims() else {
            return Err(CoreError::shape(
                op,
                "an input of rank 4 [batch, channels, height, width]",
                x,
            ));
        };
        let &[co, cg, kh, kw] = w.dims() else {
            return Err(CoreError::shape(
                op,
                "a weight of rank 4 [out_channels, in_channels / groups, kernel_h, kernel_w]",
                w.shape(),
            ));
        };
        let groups = p.groups;
        if c == 0 || co == 0 {
            return Err(CoreError::invalid(
                op,
                format!("input channels {c} and output channels {co} must both be >= 1"),
            ));
        }
        if c % groups != 0 || co % groups != 0 {
            return Err(CoreError::invalid(
                op,
                format!(
                    "groups {groups} must divide both the input channels {c} and the output \
                     channels {co}"
                ),
            ));
        }
        if cg != c / groups {
            return Err(CoreError::shape(
                op,
                format!(
                    "a weight [{co}, {}, kh, kw] (in_channels {c} / groups {groups} in dim 1)",
                    c / groups
                ),
                w.shape(),
            ));
        }
        let [ho, wo] = p.output_hw_for(op, h, wd, kh, kw)?;
        ConvGeom {
            b,
            c,
            h,
            w: wd,
            co,
            kh,
            kw,
            groups,
            cg,
            cog: co / groups,
            ho,
            wo,
            p: *p,
            chunk_columns: device.target().conv_chunk_columns(),
            implicit_gemm: device.target().conv_implicit_gemm(),
            out_len: 0,
            col_len: 0,
            stage_len: 0,
        }
        .with_sizes(op)
    }

    /// Output pixels per image and channel.
    pub fn out_pixels(&self) -> usize {
        self.ho * self.wo
    }

    /// Input pixels per image and channel.
    pub fn in_pixels(&self) -> usize {
        self.h * self.w
    }

    /// Inner dimension of one group's GEMM: `cg * kh * kw`.
    pub fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    /// Output shape `[b, co, ho, wo]`.
    pub fn out_dims(&self) -> [usize; 4] {
        [self.b, self.co, self.ho, self.wo]
    }

    /// Whether this call runs as an implicit GEMM (the target's rule, one group only): no
    /// im2col buffer, columns packed from the images into thread-local panels.
    pub fn implicit(&self) -> bool {
        self.implicit_gemm && self.groups == 1
    }

    /// The call as the implicit GEMM sees it (meaningful for one group).
    pub(super) fn shape(&self) -> super::pack::ConvShape {
        super::pack::ConvShape {
            b: self.b,
            c: self.c,
            h: self.h,
            w: self.w,
            co: self.co,
            kh: self.kh,
            kw: self.kw,
            stride: self.p.stride,
            pad: self.p.padding,
            dil: self.p.dilation,
            ho: self.ho,
            wo: self.wo,
        }
    }

    /// A 1x1 kernel with stride 1 and no padding: the input is its own column matrix.
    pub fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.p.stride == [1, 1] && self.p.padding == [0, 0]
    }

    /// Images whose columns share one im2col chunk: enough to reach the target's chunk columns,
    /// at most the batch, at least 1.
    pub fn images_per_chunk(&self) -> usize {
        self.chunk_columns
            .div_ceil(self.ho.saturating_mul(self.wo))
            .clamp(1, self.b.max(1))
    }

    /// Elements of the im2col buffer: `c * kh * kw` rows by `images_per_chunk * ho * wo` columns;
    /// 0 when the call needs none (pointwise kernels, empty batch).
    pub fn col_len(&self) -> usize {
        self.col_len
    }

    /// Elements of the `[co, images_per_chunk * ho * wo]` staging buffer between the GEMM and the
    /// `[b, co, ho, wo]` layout; 0 when a chunk holds one image (the GEMM then writes in place).
    pub fn stage_len(&self) -> usize {
        self.stage_len
    }

    /// Elements of the output `[b, co, ho, wo]`.
    pub fn out_len(&self) -> usize {
        self.out_len
    }

    /// The same call on a batch of `b` images (one time step of a folded batch).
    pub fn with_batch(&self, op: &'static str, b: usize) -> Result<Self> {
        ConvGeom { b, ..*self }.with_sizes(op)
    }

    /// Computes the buffer sizes, failing (instead of overflowing) on absurd shapes.
    fn with_sizes(mut self, op: &'static str) -> Result<Self> {
        let overflow = || CoreError::invalid(op, "the output or im2col buffer size overflows usize");
        let mul = |a: usize, b: usize| a.checked_mul(b).ok_or_else(overflow);
        let pix = mul(self.ho, self.wo)?;
        self.out_len = mul(mul(self.b, self.co)?, pix)?;
        let chunk_cols = mul(self.images_per_chunk(), pix)?;
        let empty = self.pointwise() || self.b == 0;
        self.col_len = if empty {
            0
        } else {
            mul(mul(mul(self.c, self.kh)?, self.kw)?, chunk_cols)?
        };
        self.stage_len = if empty || self.images_per_chunk() == 1 {
            0
        } else {
            mul(self.co, chunk_cols)?
        };
        Ok(self)
    }
}
