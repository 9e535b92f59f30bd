//! Resizing frames as SpikingJelly's CIFAR10-DVS example does: `transforms.Resize(size=(48,
//! 48))` on a float tensor, which is torchvision's bilinear interpolation with `antialias=True`
//! (PyTorch's `_upsample_bilinear2d_aa`, `align_corners=False`): every output pixel is a
//! normalised triangle-filter average whose support widens with the downscaling factor;
//! upscaling reduces to ordinary bilinear interpolation.

use crate::budget::{MemoryBudget, bytes_of, filled};
use crate::error::{DataError, Result};
use crate::frames::Frames;

/// Per output index: first input index and normalised weights.
fn weights(input: usize, output: usize) -> Vec<(usize, Vec<f64>)> {
    let scale = input as f64 / output as f64;
    let support = if scale >= 1.0 { scale } else { 1.0 };
    let inv = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    (0..output)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            let xmin = ((center - support + 0.5).floor().max(0.0)) as usize;
            let xmax = ((center + support + 0.5).floor() as usize).min(input);
            let mut w: Vec<f64> = (xmin..xmax)
                .map(|j| {
                    let x = (j as f64 - center + 0.5) * inv;
                    (1.0 - x.abs()).max(0.0)
                })
                .collect();
            let total: f64 = w.iter().sum();
            if total > 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (xmin, w)
        })
        .collect()
}

/// Resizes every `[H, W]` plane of `frames` to `[out_h, out_w]` (antialiased bilinear, as
/// above): width first, then height, as PyTorch's separable CPU kernel does.
pub fn resize_bilinear_aa(frames: &Frames, out_h: usize, out_w: usize) -> Result<Frames> {
    resize_within(frames, out_h, out_w, &MemoryBudget::unlimited())
}

/// [`resize_bilinear_aa`], refusing before anything is allocated when the resized frames and
/// the intermediate rows would exceed `budget`.
pub fn resize_within(frames: &Frames, out_h: usize, out_w: usize, budget: &MemoryBudget) -> Result<Frames> {
    if out_h == 0 || out_w == 0 {
        return Err(DataError::Invalid(format!(
            "cannot resize frames to {out_h}x{out_w}"
        )));
    }
    let [t, c, h, w] = frames.dims;
    if frames.dims.contains(&0) {
        return Err(DataError::Invalid(format!(
            "cannot resize frames {:?}: a dimension of 0 has no values to interpolate",
            frames.dims
        )));
    }
    let planes = t * c;
    let dims = [t, c, out_h, out_w];
    let too_large = || DataError::Invalid(format!("resized frames {dims:?} exceed the address space"));
    let values = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_large)?;
    let rows = h.checked_mul(out_w).ok_or_else(too_large)?;
    let need = bytes_of::<f32>(values, "resized frames")?
        .checked_add(bytes_of::<f32>(rows, "resized rows")?)
        .ok_or_else(too_large)?;
    budget.check(need, || format!("resizing frames {:?} to {dims:?}", frames.dims))?;
    let (wx, wy) = (weights(w, out_w), weights(h, out_h));
    let mut out = filled(values, 0f32)?;
    let mut tmp = filled(rows, 0f32)?;
    for p in 0..planes {
        let src = &frames.data[p * h * w..(p + 1) * h * w];
        for y in 0..h {
            for (ox, (x0, ws)) in wx.iter().enumerate() {
                let acc: f64 = ws
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| v * f64::from(src[y * w + x0 + k]))
                    .sum();
                tmp[y * out_w + ox] = acc as f32;
            }
        }
        let dst = &mut out[p * out_h * out_w..(p + 1) * out_h * out_w];
        for (oy, (y0, ws)) in wy.iter().enumerate() {
            for ox in 0..out_w {
                let acc: f64 = ws
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| v * f64::from(tmp[(y0 + k) * out_w + ox]))
                    .sum();
                dst[oy * out_w + ox] = acc as f32;
            }
        }
    }
    Ok(Frames {
        dims: [t, c, out_h, out_w],
        data: out,
    })
}
