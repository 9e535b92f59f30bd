//! Splitting an f32 tensor into contiguous parts along one dimension, and the concatenation
//! along that dimension that undoes it (its backward). The attention blocks split `Q, K, V`
//! from one projection this way.

use super::reduce::{check_dim, split_at_dim};
use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::elementwise as ew_k;
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};

/// Rows of `len` elements copied between two buffers whose rows start `src_pitch` and
/// `dst_pitch` elements apart, from the first row of each.
#[derive(Debug, Clone, Copy)]
struct Rows {
    rows: usize,
    len: usize,
    src_pitch: usize,
    dst_pitch: usize,
}

/// Splits `x` along `dim` into parts of `sizes` (which must add up to `x`'s size there), each a
/// contiguous copy recorded as an activation. Keeps the spike flag.
pub fn split_dim(x: &Tensor, dim: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    const OP: &str = "split_dim";
    check_dim(OP, x, dim)?;
    if sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(x.dims()[dim]) {
        return Err(CoreError::invalid(
            OP,
            format!(
                "part sizes {sizes:?} must add up to dimension {dim} of {}, {}",
                x.shape(),
                x.dims()[dim]
            ),
        ));
    }
    let (outer, _, inner) = split_at_dim(x.dims(), dim);
    let xr = x.read::<f32>(OP)?;
    let mut parts = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &size in sizes {
        let rows = Rows {
            rows: outer,
            len: size * inner,
            src_pitch: x.dims()[dim] * inner,
            dst_pitch: size * inner,
        };
        let mut out = KernelBuffer::<f32>::new(
            OP,
            x.device(),
            outer * size * inner,
            MemoryKind::Activation,
            Init::Overwritten,
        )?;
        let from = start * inner;
        compute(x.device(), |backend| match backend {
            Compute::Cpu => {
                copy_rows_host(&xr.host()?[from..], out.host_mut()?, rows);
                Ok(())
            }
            Compute::Cuda(gpu) => copy_rows_cuda(gpu, xr.cuda_ptr()?.offset(from, 4), out.cuda_ptr()?, rows),
        })?;
        let mut dims = x.dims().to_vec();
        dims[dim] = size;
        parts.push(out.into_tensor(dims)?.with_spike_flag(x.is_spike()));
        start += size;
    }
    Ok(parts)
}

/// Concatenates f32 `parts` along `dim` into a new tensor recorded with `kind`: the inverse of
/// [`split_dim`]. The parts must have the same rank, the same other dimensions and one device.
pub fn cat_dim(parts: &[Tensor], dim: usize, kind: MemoryKind) -> Result<Tensor> {
    const OP: &str = "cat_dim";
    let Some(first) = parts.first() else {
        return Err(CoreError::invalid(OP, "needs at least one tensor to concatenate"));
    };
    check_dim(OP, first, dim)?;
    let mut total = 0usize;
    let too_large = || {
        CoreError::invalid(
            OP,
            "the concatenation has more elements than fit in the address space",
        )
    };
    for (i, p) in parts.iter().enumerate() {
        first.expect_same_device(OP, p)?;
        let same_rest = p.rank() == first.rank()
            && p.dims()[..dim] == first.dims()[..dim]
            && p.dims()[dim + 1..] == first.dims()[dim + 1..];
        if !same_rest {
            return Err(CoreError::shape(
                OP,
                format!(
                    "part {i} with the dimensions of part 0 {} except {dim}",
                    first.shape()
                ),
                p.shape(),
            ));
        }
        total = total.checked_add(p.dims()[dim]).ok_or_else(too_large)?;
    }
    let (outer, _, inner) = split_at_dim(first.dims(), dim);
    let mut dims = first.dims().to_vec();
    dims[dim] = total;
    let len = outer
        .checked_mul(total)
        .and_then(|v| v.checked_mul(inner))
        .ok_or_else(too_large)?;
    let mut out = KernelBuffer::<f32>::new(OP, first.device(), len, kind, Init::Overwritten)?;
    let mut start = 0;
    // One part at a time: parts may be views of one storage, whose lock is not re-entered.
    for p in parts {
        let size = p.dims()[dim];
        let pr = p.read::<f32>(OP)?;
        let rows = Rows {
            rows: outer,
            len: size * inner,
            src_pitch: size * inner,
            dst_pitch: total * inner,
        };
        let to = start * inner;
        compute(first.device(), |backend| match backend {
            Compute::Cpu => {
                copy_rows_host(pr.host()?, &mut out.host_mut()?[to..], rows);
                Ok(())
            }
            Compute::Cuda(gpu) => copy_rows_cuda(gpu, pr.cuda_ptr()?, out.cuda_ptr()?.offset(to, 4), rows),
        })?;
        start += size;
    }
    out.into_tensor(dims)
}

fn copy_rows_host(src: &[f32], dst: &mut [f32], r: Rows) {
    for row in 0..r.rows {
        let (s, d) = (row * r.src_pitch, row * r.dst_pitch);
        dst[d..d + r.len].copy_from_slice(&src[s..s + r.len]);
    }
}

fn copy_rows_cuda(
    gpu: crate::backend::CudaBackend,
    src: crate::cuda::CudaPtr,
    dst: crate::cuda::CudaPtr,
    r: Rows,
) -> Result<()> {
    let n = (r.rows * r.len) as u64;
    if n == 0 {
        return Ok(());
    }
    ew_k::copy_rows(
        gpu,
        grid_for(n),
        src,
        dst,
        r.rows as u64,
        r.len as u64,
        r.src_pitch as u64,
        r.dst_pitch as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::kernels::testkit::{assert_meta_matches_cpu, cpu, tensor, values};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn split_matches_naive_and_cat_undoes_it(
            dims in prop::collection::vec(1usize..4, 1..5),
            pick in 0usize..4,
            cuts in prop::collection::vec(0usize..3, 1..4),
            spike in any::<bool>(),
        ) {
            let dim = pick % dims.len();
            // Part sizes that add up to dims[dim] (some may be empty).
            let mut sizes: Vec<usize> = cuts.iter().map(|&c| c.min(dims[dim])).collect();
            let used: usize = sizes.iter().sum();
            if used > dims[dim] {
                sizes = vec![dims[dim]];
            } else {
                sizes.push(dims[dim] - used);
            }
            let n: usize = dims.iter().product();
            let v = values(n, 7);
            let x = cpu(&v, &dims).with_spike_flag(spike);
            let parts = split_dim(&x, dim, &sizes).unwrap();
            let (outer, _, inner) = split_at_dim(&dims, dim);
            let mut start = 0;
            for (p, &s) in parts.iter().zip(&sizes) {
                let mut want_dims = dims.clone();
                want_dims[dim] = s;
                prop_assert_eq!(p.dims(), &want_dims[..]);
                prop_assert_eq!(p.is_spike(), spike);
                let got = p.to_vec_f32().unwrap();
                for o in 0..outer {
                    for j in 0..s {
                        for i in 0..inner {
                            prop_assert_eq!(got[(o * s + j) * inner + i], v[(o * dims[dim] + start + j) * inner + i]);
                        }
                    }
                }
                start += s;
            }
            let back = cat_dim(&parts, dim, MemoryKind::Gradient).unwrap();
            prop_assert_eq!(back.dims(), &dims[..]);
            prop_assert_eq!(back.kind(), MemoryKind::Gradient);
            prop_assert_eq!(back.to_vec_f32().unwrap(), v);
        }
    }

    #[test]
    fn meta_records_the_same_events_as_cpu() {
        assert_meta_matches_cpu(|dev| {
            let x = tensor(values(2 * 12 * 5, 1), &[2, 12, 5], dev);
            let parts = split_dim(&x, 1, &[4, 4, 4]).unwrap();
            let back = cat_dim(&parts, 1, MemoryKind::Gradient).unwrap();
            let mut shapes: Vec<Vec<usize>> = parts.iter().map(|t| t.dims().to_vec()).collect();
            shapes.push(back.dims().to_vec());
            shapes
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let x = cpu(&[0.0; 12], &[2, 6]);
        let e = split_dim(&x, 2, &[1]).unwrap_err().to_string();
        assert!(e.contains("split_dim") && e.contains("0..2"), "{e}");
        let e = split_dim(&x, 1, &[2, 2]).unwrap_err().to_string();
        assert!(e.contains("add up to") && e.contains("6"), "{e}");
        let e = cat_dim(&[], 0, MemoryKind::Gradient).unwrap_err().to_string();
        assert!(e.contains("at least one"), "{e}");
        let e = cat_dim(&[x.clone(), cpu(&[0.0; 6], &[3, 2])], 1, MemoryKind::Gradient)
            .unwrap_err()
            .to_string();
        assert!(e.contains("part 1") && e.contains("[2, 6]"), "{e}");
        let h = tensor(vec![1i64, 2], &[2], Device::Cpu);
        assert!(
            split_dim(&h, 0, &[2])
                .unwrap_err()
                .to_string()
                .contains("expected dtype f32")
        );
    }
}
