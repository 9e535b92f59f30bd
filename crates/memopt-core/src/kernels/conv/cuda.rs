//! conv2d on a GPU: the CPU's algorithm (forward.rs, backward.rs) step for step, with the CUDA
//! kernels of `conv.cu` for im2col, col2im, staging and bias, and cuBLAS for the GEMMs. Chunks
//! hold [`ConvGeom::images_per_chunk`] images (the CUDA target's 4096 columns), so the tracked
//! im2col and staging buffers are exactly those a Meta step planned for CUDA allocates.

use super::params::ConvGeom;
use crate::Result;
use crate::backend::CudaBackend;
use crate::cuda::gemm::{GpuMat, gemm};
use crate::cuda::launchers::conv as k;
use crate::cuda::{CudaPtr, grid_for};

/// The device addresses one conv2d call works on (null where a buffer was not allocated; the
/// code below reads only those the CPU's algorithm reads for the same geometry).
pub(super) struct GpuBufs {
    /// The op's cuBLAS workspace (address, bytes).
    pub gemm_ws: (CudaPtr, usize),
    /// The im2col buffer ([`ConvGeom::col_len`] elements).
    pub col: CudaPtr,
    /// The staging buffer ([`ConvGeom::stage_len`] elements).
    pub stage: CudaPtr,
}

impl ConvGeom {
    /// The geometry as `conv.cu` takes it.
    fn cuda(&self) -> crate::cuda::ConvGeom {
        let [sh, sw] = self.p.stride.map(|v| v as i64);
        let [ph, pw] = self.p.padding.map(|v| v as i64);
        let [dh, dw] = self.p.dilation.map(|v| v as i64);
        let [c, h, w, kh, kw, ho, wo] =
            [self.c, self.h, self.w, self.kh, self.kw, self.ho, self.wo].map(|v| v as u64);
        crate::cuda::ConvGeom {
            c,
            h,
            w,
            kh,
            kw,
            ho,
            wo,
            sh,
            sw,
            ph,
            pw,
            dh,
            dw,
        }
    }

    /// Weight of group `gi` as a `[cog, k]` matrix.
    fn weight(&self, w: CudaPtr, gi: usize) -> GpuMat {
        GpuMat::row_major(w.add_f32(gi * self.cog * self.k()), self.cog, self.k())
    }
}

/// The `[c * kh * kw, n * ho * wo]` column matrix of images `b0..b0 + n` of `x` into `col`.
fn im2col_chunk(
    gpu: CudaBackend,
    g: &ConvGeom,
    x: CudaPtr,
    (b0, n): (usize, usize),
    col: CudaPtr,
) -> Result<()> {
    let items = (g.c * g.kh * g.kw * n * g.out_pixels()) as u64;
    let images = x.add_f32(b0 * g.c * g.in_pixels());
    k::im2col(gpu, grid_for(items), images, g.cuda(), n as u64, col)
}

/// `out = conv2d(x, w) + bias` on `gpu` for geometry `g` (one time step of a folded batch).
pub(super) fn forward(
    gpu: CudaBackend,
    g: &ConvGeom,
    (x, w, bias): (CudaPtr, CudaPtr, Option<CudaPtr>),
    out: CudaPtr,
    bufs: &GpuBufs,
) -> Result<()> {
    if g.b == 0 {
        return Ok(());
    }
    let (pix, kk, cog) = (g.out_pixels(), g.k(), g.cog);
    let chunk = g.images_per_chunk();
    let in_place = g.pointwise() || chunk == 1;
    if let (Some(b), true) = (bias, in_place) {
        // Row (image, channel) of the output starts as bias[channel]; the GEMMs add into it.
        let rows = (g.b * g.co) as u64;
        let len = rows * pix as u64;
        k::fill_bias_rows(gpu, grid_for(len), out, rows, pix as u64, b, g.co as u64)?;
    }
    let acc = bias.is_some();
    if g.pointwise() {
        // The input planes of group gi of image b are the [cg, h*w] column matrix itself.
        for b in 0..g.b {
            for gi in 0..g.groups {
                let dst = out.add_f32((b * g.co + gi * cog) * pix);
                let cols = GpuMat::row_major(x.add_f32((b * g.c + gi * g.cg) * pix), g.cg, pix);
                gemm(gpu, bufs.gemm_ws, dst, pix, g.weight(w, gi), cols, acc)?;
            }
        }
        return Ok(());
    }
    for b0 in (0..g.b).step_by(chunk) {
        let n = chunk.min(g.b - b0);
        let ncols = n * pix;
        im2col_chunk(gpu, g, x, (b0, n), bufs.col)?;
        let cols = |gi: usize| GpuMat::row_major(bufs.col.add_f32(gi * kk * ncols), kk, ncols);
        if chunk == 1 {
            // One image: each group's GEMM writes its rows of the output in place.
            for gi in 0..g.groups {
                let dst = out.add_f32((b0 * g.co + gi * cog) * pix);
                gemm(gpu, bufs.gemm_ws, dst, pix, g.weight(w, gi), cols(gi), acc)?;
            }
        } else {
            for gi in 0..g.groups {
                let dst = bufs.stage.add_f32(gi * cog * ncols);
                gemm(gpu, bufs.gemm_ws, dst, ncols, g.weight(w, gi), cols(gi), false)?;
            }
            let total = (n * g.co * pix) as u64;
            let bias_ptr = bias.unwrap_or(CudaPtr(0));
            let dst = out.add_f32(b0 * g.co * pix);
            k::unstage(
                gpu,
                grid_for(total),
                bufs.stage,
                n as u64,
                g.co as u64,
                pix as u64,
                bias_ptr,
                dst,
            )?;
        }
    }
    Ok(())
}

/// The gradients one backward pass writes (each `None` when not wanted); `gw_accumulate` says
/// whether `gw` holds a sum to add to, `gb_accumulate` likewise for `gb`.
pub(super) struct GpuGrads {
    pub gx: Option<CudaPtr>,
    pub gw: Option<CudaPtr>,
    pub gb: Option<CudaPtr>,
    pub gw_accumulate: bool,
    pub gb_accumulate: bool,
}

/// Gradients of conv2d on `gpu` for geometry `g`, given the output gradient `grad` and the
/// forward's `x` and `w`, in the CPU's order (backward.rs). `gx` arrives zeroed or is written
/// whole (col2im writes every element of each chunk's images).
pub(super) fn backward(
    gpu: CudaBackend,
    g: &ConvGeom,
    (grad, x, w): (CudaPtr, CudaPtr, CudaPtr),
    grads: &GpuGrads,
    bufs: &GpuBufs,
) -> Result<()> {
    let pix = g.out_pixels();
    if let (Some(gb), true) = (grads.gb, g.co > 0) {
        let (b, co) = (g.b as u64, g.co as u64);
        k::conv_bias_grad(
            gpu,
            grid_for(co),
            grad,
            b,
            co,
            pix as u64,
            gb,
            grads.gb_accumulate as i32,
        )?;
    }
    if g.b == 0 || (grads.gx.is_none() && grads.gw.is_none()) {
        return Ok(());
    }
    let (kk, cog) = (g.k(), g.cog);
    let ws = bufs.gemm_ws;
    if g.pointwise() {
        let (in_len, out_len) = (g.c * pix, g.co * pix);
        let gr =
            |b: usize, gi: usize| GpuMat::row_major(grad.add_f32(b * out_len + gi * cog * pix), cog, pix);
        if let Some(gw) = grads.gw {
            for gi in 0..g.groups {
                let dst = gw.add_f32(gi * cog * kk);
                for b in 0..g.b {
                    let xs = GpuMat::row_major(x.add_f32(b * in_len + gi * kk * pix), kk, pix);
                    gemm(gpu, ws, dst, kk, gr(b, gi), xs.t(), grads.gw_accumulate || b > 0)?;
                }
            }
        }
        if let Some(gx) = grads.gx {
            for b in 0..g.b {
                for gi in 0..g.groups {
                    let dst = gx.add_f32((b * g.groups + gi) * kk * pix);
                    gemm(gpu, ws, dst, pix, g.weight(w, gi).t(), gr(b, gi), false)?;
                }
            }
        }
        return Ok(());
    }
    let chunk = g.images_per_chunk();
    let (in_len, out_len) = (g.c * g.in_pixels(), g.co * pix);
    let geom = g.cuda();
    for b0 in (0..g.b).step_by(chunk) {
        let n = chunk.min(g.b - b0);
        let ncols = n * pix;
        let grad_chunk = grad.add_f32(b0 * out_len);
        // The output gradient of the chunk as a [co, n * pix] matrix: in place for one image,
        // gathered into the staging buffer for several.
        let src = if chunk == 1 {
            grad_chunk
        } else {
            let total = (n * g.co * pix) as u64;
            k::stage_grad(
                gpu,
                grid_for(total),
                grad_chunk,
                n as u64,
                g.co as u64,
                pix as u64,
                bufs.stage,
            )?;
            bufs.stage
        };
        let gsrc = |gi: usize| GpuMat::row_major(src.add_f32(gi * cog * ncols), cog, ncols);
        let cols = |gi: usize| GpuMat::row_major(bufs.col.add_f32(gi * kk * ncols), kk, ncols);
        if let Some(gw) = grads.gw {
            im2col_chunk(gpu, g, x, (b0, n), bufs.col)?;
            for gi in 0..g.groups {
                let dst = gw.add_f32(gi * cog * kk);
                gemm(
                    gpu,
                    ws,
                    dst,
                    kk,
                    gsrc(gi),
                    cols(gi).t(),
                    grads.gw_accumulate || b0 > 0,
                )?;
            }
        }
        if let Some(gx) = grads.gx {
            for gi in 0..g.groups {
                let dst = bufs.col.add_f32(gi * kk * ncols);
                gemm(gpu, ws, dst, ncols, g.weight(w, gi).t(), gsrc(gi), false)?;
            }
            let total = (n * in_len) as u64;
            k::col2im(
                gpu,
                grid_for(total),
                bufs.col,
                geom,
                n as u64,
                gx.add_f32(b0 * in_len),
            )?;
        }
    }
    Ok(())
}
