//! Reductions (sum and mean over everything or one dimension) and their backward broadcasts.
//!
//! Sums accumulate in f64 in a fixed order (blocks of fixed size combined in index order), so
//! results are accurate and do not depend on the number of threads.

use super::accum::{BLOCK, BlockedSum, sum_f64};
use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::{elementwise as ew_k, reduce as gpu_k};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Shape, Tensor};
use rayon::prelude::*;

/// Output columns accumulated together in [`sum_dim`] (an f64 accumulator array on the stack).
const TILE: usize = 64;

/// Output elements below which [`sum_dim`] and the broadcasts stay on the calling thread.
const SERIAL_BELOW: usize = 1 << 12;

/// Sum of all elements as a scalar (shape `[]`), accumulated in f64.
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    reduce_all("sum_all", x, 1.0)
}

/// Mean of all elements as a scalar (shape `[]`), accumulated in f64; NaN for an empty tensor,
/// as in PyTorch.
pub fn mean_all(x: &Tensor) -> Result<Tensor> {
    reduce_all("mean_all", x, 1.0 / x.elem_count() as f64)
}

fn reduce_all(op: &'static str, x: &Tensor, factor: f64) -> Result<Tensor> {
    let xr = x.read::<f32>(op)?;
    let mut out = KernelBuffer::<f32>::new(op, x.device(), 1, MemoryKind::Activation, Init::Overwritten)?;
    let mut sum = BlockedSum::new(op, x.device(), x.elem_count(), x.device().target().sum_block())?;
    compute(x.device(), |backend| match backend {
        Compute::Cpu => {
            let (xs, o) = (xr.host()?, out.host_mut()?);
            o[0] = (sum.run(|r| sum_f64(&xs[r]))? * factor) as f32;
            Ok(())
        }
        Compute::Cuda(gpu) => {
            let (xp, n) = (xr.cuda_ptr()?, x.elem_count() as u64);
            let block = sum.block() as u64;
            let op = out.cuda_ptr()?;
            sum.run_cuda(
                gpu,
                8,
                |parts, grid| gpu_k::sum_blocks(gpu, grid, xp, n, block, parts, factor, op),
                (factor, 1.0),
                op,
            )
        }
    })?;
    drop(sum);
    out.into_tensor(Shape::scalar())
}

/// Sum over dimension `dim`, which is removed: `[a, d, b]` -> `[a, b]`. Accumulated in f64.
pub fn sum_dim(x: &Tensor, dim: usize) -> Result<Tensor> {
    reduce_dim("sum_dim", x, dim, false)
}

/// Mean over dimension `dim`, which is removed; NaN where the dimension is empty, as in PyTorch.
pub fn mean_dim(x: &Tensor, dim: usize) -> Result<Tensor> {
    reduce_dim("mean_dim", x, dim, true)
}

/// `(outer, size, inner)` of `dims` around `dim`.
pub(super) fn split_at_dim(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = dims[..dim].iter().product();
    let inner = dims[dim + 1..].iter().product();
    (outer, dims[dim], inner)
}

/// An error naming `op` when `x` has no dimension `dim`.
pub(super) fn check_dim(op: &'static str, x: &Tensor, dim: usize) -> Result<()> {
    if dim >= x.rank() {
        return Err(CoreError::invalid(
            op,
            format!(
                "dimension {dim} is out of range for a tensor of shape {} (valid: 0..{})",
                x.shape(),
                x.rank()
            ),
        ));
    }
    Ok(())
}

fn reduce_dim(op: &'static str, x: &Tensor, dim: usize, mean: bool) -> Result<Tensor> {
    check_dim(op, x, dim)?;
    let (outer, d, inner) = split_at_dim(x.dims(), dim);
    let mut out_dims = x.dims().to_vec();
    out_dims.remove(dim);
    let xr = x.read::<f32>(op)?;
    let mut out = KernelBuffer::<f32>::new(
        op,
        x.device(),
        outer * inner,
        MemoryKind::Activation,
        Init::Overwritten,
    )?;
    let factor = if mean { 1.0 / d as f64 } else { 1.0 };
    compute(x.device(), |backend| {
        let gpu = match backend {
            Compute::Cpu => None,
            Compute::Cuda(gpu) => Some(gpu),
        };
        if let Some(gpu) = gpu {
            let (count, xp, op) = ((outer * inner) as u64, xr.cuda_ptr(), out.cuda_ptr()?);
            return match inner {
                _ if count == 0 => Ok(()),
                // One group of 8 lanes per contiguous row of d values.
                1 => gpu_k::sum_rows(gpu, grid_for(count * 8), xp?, outer as u64, d as u64, factor, op),
                _ => gpu_k::sum_columns(
                    gpu,
                    grid_for(count),
                    xp?,
                    outer as u64,
                    d as u64,
                    inner as u64,
                    factor,
                    op,
                ),
            };
        }
        let (xs, os) = (xr.host()?, out.host_mut()?);
        let row = |o: usize, orow: &mut [f32]| {
            let src = &xs[o * d * inner..(o + 1) * d * inner];
            if inner == 1 {
                orow[0] = (sum_f64(src) * factor) as f32;
                return;
            }
            for (t, tile) in orow.chunks_mut(TILE).enumerate() {
                let base = t * TILE;
                let mut acc = [0f64; TILE];
                for j in 0..d {
                    let line = &src[j * inner + base..j * inner + base + tile.len()];
                    for (a, &v) in acc.iter_mut().zip(line) {
                        *a += v as f64;
                    }
                }
                for (o, a) in tile.iter_mut().zip(acc) {
                    *o = (a * factor) as f32;
                }
            }
        };
        if inner > 0 {
            if outer * inner * d.max(1) < SERIAL_BELOW {
                os.chunks_mut(inner).enumerate().for_each(|(o, r)| row(o, r));
            } else {
                os.par_chunks_mut(inner).enumerate().for_each(|(o, r)| row(o, r));
            }
        }
        Ok(())
    })?;
    out.into_tensor(out_dims)
}

/// Backward of [`sum_dim`] / [`mean_dim`]: `g` (the input's shape without `dim`) repeated along a
/// new dimension `dim` of `size`, times `scale` (1 for sums, `1/size` for means). Kind Gradient.
pub fn broadcast_dim(g: &Tensor, dim: usize, size: usize, scale: f32) -> Result<Tensor> {
    const OP: &str = "broadcast_dim";
    if dim > g.rank() {
        return Err(CoreError::invalid(
            OP,
            format!(
                "cannot insert dimension {dim} into a gradient of shape {} (valid: 0..={})",
                g.shape(),
                g.rank()
            ),
        ));
    }
    let mut dims = g.dims().to_vec();
    dims.insert(dim, size);
    let (outer, _, inner) = split_at_dim(&dims, dim);
    let gr = g.read::<f32>(OP)?;
    let mut out = KernelBuffer::<f32>::new(
        OP,
        g.device(),
        outer * size * inner,
        MemoryKind::Gradient,
        Init::Overwritten,
    )?;
    compute(g.device(), |backend| {
        if inner == 0 || size == 0 || outer == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let (o, s, i) = (outer as u64, size as u64, inner as u64);
            return ew_k::broadcast_dim(
                gpu,
                grid_for(o * s * i),
                gr.cuda_ptr()?,
                out.cuda_ptr()?,
                o,
                s,
                i,
                scale,
            );
        }
        let (gs, os) = (gr.host()?, out.host_mut()?);
        let fill = |j: usize, line: &mut [f32]| {
            let o = j / size;
            for (d, &v) in line.iter_mut().zip(&gs[o * inner..(o + 1) * inner]) {
                *d = v * scale;
            }
        };
        if os.len() < SERIAL_BELOW {
            os.chunks_mut(inner).enumerate().for_each(|(j, l)| fill(j, l));
        } else {
            os.par_chunks_mut(inner).enumerate().for_each(|(j, l)| fill(j, l));
        }
        Ok(())
    })?;
    out.into_tensor(dims)
}

/// Backward of [`sum_all`] / [`mean_all`]: the one value of `g` repeated over `dims`, times `scale`
/// (1 for sums, `1/n` for means). Kind Gradient.
pub fn broadcast_scalar(g: &Tensor, dims: &[usize], scale: f32) -> Result<Tensor> {
    const OP: &str = "broadcast_scalar";
    if g.elem_count() != 1 {
        return Err(CoreError::shape(OP, "a scalar gradient (one element)", g.shape()));
    }
    let gr = g.read::<f32>(OP)?;
    let n = dims.iter().product();
    let mut out = KernelBuffer::<f32>::new(OP, g.device(), n, MemoryKind::Gradient, Init::Overwritten)?;
    compute(g.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            return match n as u64 {
                0 => Ok(()),
                n => ew_k::broadcast_scalar(gpu, grid_for(n), gr.cuda_ptr()?, out.cuda_ptr()?, n, scale),
            };
        }
        let (gs, os) = (gr.host()?, out.host_mut()?);
        let v = gs[0] * scale;
        if os.len() < SERIAL_BELOW {
            os.fill(v);
        } else {
            os.par_chunks_mut(BLOCK).for_each(|c| c.fill(v));
        }
        Ok(())
    })?;
    out.into_tensor(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::kernels::testkit::{
        assert_close, assert_meta_matches_cpu, central_diff, cpu, dot, tensor, values,
    };
    use proptest::prelude::*;

    /// Random dims (rank 1..=4, each 1..=4) and values.
    fn shaped() -> impl Strategy<Value = (Vec<usize>, Vec<f32>)> {
        prop::collection::vec(1usize..5, 1..5).prop_flat_map(|dims| {
            let n: usize = dims.iter().product();
            (Just(dims), prop::collection::vec(-4.0f32..4.0, n))
        })
    }

    fn naive_sum_dim(x: &[f32], dims: &[usize], dim: usize) -> Vec<f64> {
        let (outer, d, inner) = split_at_dim(dims, dim);
        let mut out = vec![0f64; outer * inner];
        for o in 0..outer {
            for j in 0..d {
                for i in 0..inner {
                    out[o * inner + i] += x[(o * d + j) * inner + i] as f64;
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn all_and_dim_reductions_match_naive((dims, x) in shaped(), pick in 0usize..4) {
            let t = cpu(&x, &dims);
            let total: f64 = x.iter().map(|&v| v as f64).sum();
            let s = sum_all(&t).unwrap();
            prop_assert_eq!(s.dims(), &[] as &[usize]);
            assert_close(&s.to_vec_f32().unwrap(), &[total], 1e-6, 1e-6, "sum_all");
            let m = mean_all(&t).unwrap().to_vec_f32().unwrap();
            assert_close(&m, &[total / x.len() as f64], 1e-6, 1e-6, "mean_all");

            let dim = pick % dims.len();
            let want = naive_sum_dim(&x, &dims, dim);
            let mut out_dims = dims.clone();
            out_dims.remove(dim);
            let got = sum_dim(&t, dim).unwrap();
            prop_assert_eq!(got.dims(), &out_dims[..]);
            assert_close(&got.to_vec_f32().unwrap(), &want, 1e-6, 1e-6, "sum_dim");
            let d = dims[dim] as f64;
            let want_mean: Vec<f64> = want.iter().map(|v| v / d).collect();
            assert_close(&mean_dim(&t, dim).unwrap().to_vec_f32().unwrap(), &want_mean, 1e-6, 1e-6, "mean_dim");
        }

        #[test]
        fn broadcasts_match_naive((dims, x) in shaped(), pick in 0usize..4, scale in -2.0f32..2.0) {
            let dim = pick % dims.len();
            let mut g_dims = dims.clone();
            g_dims.remove(dim);
            let g_len: usize = g_dims.iter().product();
            let g: Vec<f32> = x[..g_len].to_vec();
            let out = broadcast_dim(&cpu(&g, &g_dims), dim, dims[dim], scale).unwrap();
            prop_assert_eq!(out.dims(), &dims[..]);
            prop_assert_eq!(out.kind(), MemoryKind::Gradient);
            let (outer, d, inner) = split_at_dim(&dims, dim);
            let got = out.to_vec_f32().unwrap();
            for o in 0..outer {
                for j in 0..d {
                    for i in 0..inner {
                        prop_assert_eq!(got[(o * d + j) * inner + i], g[o * inner + i] * scale);
                    }
                }
            }
            let b = broadcast_scalar(&cpu(&[x[0]], &[]), &dims, scale).unwrap();
            prop_assert_eq!(b.dims(), &dims[..]);
            prop_assert!(b.to_vec_f32().unwrap().iter().all(|&v| v == x[0] * scale));
        }
    }

    #[test]
    fn large_inputs_are_accurate_and_deterministic() {
        // 100_003 values: several blocks, a ragged last block, many tiles per row.
        let x = values(100_003, 5);
        let t = cpu(&x, &[100_003]);
        let total: f64 = x.iter().map(|&v| v as f64).sum();
        let a = sum_all(&t).unwrap().to_scalar_f32().unwrap();
        assert_eq!(a, total as f32);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let b = pool.install(|| sum_all(&t).unwrap().to_scalar_f32().unwrap());
        assert_eq!(a.to_bits(), b.to_bits());
        let t2 = cpu(&x[..100_000], &[40, 2500]);
        let want = naive_sum_dim(&x[..100_000], &[40, 2500], 0);
        assert_close(
            &sum_dim(&t2, 0).unwrap().to_vec_f32().unwrap(),
            &want,
            1e-6,
            1e-6,
            "sum_dim",
        );
        let one = pool.install(|| sum_dim(&t2, 0).unwrap().to_vec_f32().unwrap());
        assert_eq!(one, sum_dim(&t2, 0).unwrap().to_vec_f32().unwrap());
    }

    #[test]
    fn empty_dimensions_follow_pytorch() {
        let e = tensor::<f32>(vec![], &[2, 0, 3], Device::Cpu);
        assert_eq!(sum_all(&e).unwrap().to_scalar_f32().unwrap(), 0.0);
        assert!(mean_all(&e).unwrap().to_scalar_f32().unwrap().is_nan());
        assert_eq!(sum_dim(&e, 1).unwrap().to_vec_f32().unwrap(), vec![0.0; 6]);
        assert!(
            mean_dim(&e, 1)
                .unwrap()
                .to_vec_f32()
                .unwrap()
                .iter()
                .all(|v| v.is_nan())
        );
        assert_eq!(sum_dim(&e, 0).unwrap().dims(), &[0, 3]);
    }

    #[test]
    fn backward_broadcasts_match_finite_differences() {
        let dims = [3, 4, 2];
        let x = values(24, 9);
        let w = values(6, 10); // weights of a loss over mean_dim(x, 1), shape [3, 2]
        let loss = |v: &[f32]| dot(&mean_dim(&cpu(v, &dims), 1).unwrap().to_vec_f32().unwrap(), &w);
        let fd = central_diff(&x, 1e-2, loss);
        let g = broadcast_dim(&cpu(&w, &[3, 2]), 1, 4, 0.25).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-3, 1e-4, "mean_dim backward");
        let fd = central_diff(&x, 1e-2, |v| {
            sum_all(&cpu(v, &dims)).unwrap().to_scalar_f32().unwrap() as f64 * 1.5
        });
        let g = broadcast_scalar(&cpu(&[1.5], &[]), &dims, 1.0).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-3, 1e-4, "sum_all backward");
        let fd = central_diff(&x, 1e-2, |v| {
            sum_dim(&cpu(v, &dims), 2).unwrap().to_vec_f32().unwrap()[5] as f64
        });
        let mut onehot = vec![0f32; 12];
        onehot[5] = 1.0;
        let g = broadcast_dim(&cpu(&onehot, &[3, 4]), 2, 2, 1.0).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-3, 1e-4, "sum_dim backward");
    }

    #[test]
    fn meta_records_the_same_events_as_cpu() {
        assert_meta_matches_cpu(|dev| {
            let x = tensor(values(100_000, 1), &[10, 100, 100], dev);
            let g = tensor(values(1_000, 2), &[10, 100], dev);
            let s = tensor(vec![1.0f32], &[], dev);
            let outs = [
                sum_all(&x).unwrap(),
                mean_all(&x).unwrap(),
                sum_dim(&x, 1).unwrap(),
                mean_dim(&x, 0).unwrap(),
                broadcast_dim(&g, 2, 100, 0.01).unwrap(),
                broadcast_scalar(&s, &[10, 100, 100], 1.0).unwrap(),
            ];
            assert!(outs.iter().all(|o| !o.is_spike()));
            outs.iter().map(|o| o.dims().to_vec()).collect()
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let x = cpu(&[1.0, 2.0], &[2]);
        let e = sum_dim(&x, 1).unwrap_err().to_string();
        assert!(
            e.contains("sum_dim") && e.contains("dimension 1") && e.contains("[2]"),
            "{e}"
        );
        let e = broadcast_dim(&x, 2, 3, 1.0).unwrap_err().to_string();
        assert!(e.contains("broadcast_dim") && e.contains("0..=1"), "{e}");
        let e = broadcast_scalar(&x, &[2, 2], 1.0).unwrap_err().to_string();
        assert!(e.contains("scalar"), "{e}");
        let h = tensor(vec![1i64, 2], &[2], Device::Cpu);
        assert!(
            sum_all(&h)
                .unwrap_err()
                .to_string()
                .contains("expected dtype f32, got i64")
        );
        assert!(mean_dim(&cpu(&[1.0], &[]), 0).is_err());
    }
}
