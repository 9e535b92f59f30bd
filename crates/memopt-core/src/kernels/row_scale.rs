//! Rows scaled by a factor each: `y[.., l] = x[.., l] * s[..]`, the broadcast product of the
//! spike-driven transformer's attention (`Q * attn_lif(sum(K * V))`).

use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::elementwise as ew_k;
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

/// Output elements below which the rows are scaled on the calling thread.
const SERIAL_BELOW: usize = 1 << 14;

/// `x [.., L]` with every row of `L` values multiplied by its factor in `s` (shaped like `x`
/// without its last dimension), recorded with `kind`. A spike tensor when both are.
pub fn scale_rows(x: &Tensor, s: &Tensor, kind: MemoryKind) -> Result<Tensor> {
    const OP: &str = "scale_rows";
    x.expect_same_device(OP, s)?;
    let Some((&inner, rows)) = x.dims().split_last() else {
        return Err(CoreError::shape(OP, "x of rank >= 1", x.shape()));
    };
    if s.dims() != rows {
        return Err(CoreError::shape(
            OP,
            format!(
                "factors of shape {rows:?} (x {} without its last dimension)",
                x.shape()
            ),
            s.shape(),
        ));
    }
    let (xr, sr) = (x.read::<f32>(OP)?, s.read::<f32>(OP)?);
    let n = x.elem_count();
    let mut out = KernelBuffer::<f32>::new(OP, x.device(), n, kind, Init::Overwritten)?;
    compute(x.device(), |backend| {
        if n == 0 {
            return Ok(());
        }
        if let Compute::Cuda(gpu) = backend {
            let (xp, sp, op) = (xr.cuda_ptr()?, sr.cuda_ptr()?, out.cuda_ptr()?);
            return ew_k::row_scale(gpu, grid_for(n as u64), xp, sp, op, n as u64, inner as u64);
        }
        let (xs, ss, os) = (xr.host()?, sr.host()?, out.host_mut()?);
        let row = |(r, o): (usize, &mut [f32])| {
            let f = ss[r];
            for (y, &v) in o.iter_mut().zip(&xs[r * inner..(r + 1) * inner]) {
                *y = v * f;
            }
        };
        if n < SERIAL_BELOW {
            os.chunks_mut(inner).enumerate().for_each(row);
        } else {
            os.par_chunks_mut(inner).enumerate().for_each(row);
        }
        Ok(())
    })?;
    Ok(out
        .into_tensor(x.shape().clone())?
        .with_spike_flag(x.is_spike() && s.is_spike()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testkit::{assert_meta_matches_cpu, cpu, tensor, values};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn rows_scale_as_the_naive_product(dims in prop::collection::vec(1usize..5, 1..5), spikes in any::<bool>()) {
            let n: usize = dims.iter().product();
            let inner = *dims.last().unwrap();
            let (x, s) = (values(n, 1), values(n / inner, 2));
            let rows = &dims[..dims.len() - 1];
            let y = scale_rows(&cpu(&x, &dims).with_spike_flag(spikes), &cpu(&s, rows).with_spike_flag(spikes), MemoryKind::Gradient).unwrap();
            prop_assert_eq!(y.dims(), &dims[..]);
            prop_assert_eq!((y.kind(), y.is_spike()), (MemoryKind::Gradient, spikes));
            let got = y.to_vec_f32().unwrap();
            for (i, v) in got.iter().enumerate() {
                prop_assert_eq!(v.to_bits(), (x[i] * s[i / inner]).to_bits());
            }
        }
    }

    #[test]
    fn large_inputs_are_exact_and_meta_matches_cpu() {
        let (x, s) = (values(64 * 1000, 3), values(64, 4));
        let got = scale_rows(&cpu(&x, &[64, 1000]), &cpu(&s, &[64]), MemoryKind::Activation)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!(got.iter().enumerate().all(|(i, v)| *v == x[i] * s[i / 1000]));
        assert_meta_matches_cpu(|dev| {
            let y = scale_rows(
                &tensor(values(600, 1), &[2, 3, 100], dev),
                &tensor(values(6, 2), &[2, 3], dev),
                MemoryKind::Activation,
            )
            .unwrap();
            vec![y.dims().to_vec()]
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let x = cpu(&[0.0; 6], &[2, 3]);
        let e = scale_rows(&x, &cpu(&[0.0; 3], &[3]), MemoryKind::Activation)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scale_rows") && e.contains("[2]") && e.contains("got [3]"),
            "{e}"
        );
        let e = scale_rows(&cpu(&[1.0], &[]), &cpu(&[1.0], &[]), MemoryKind::Activation)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank >= 1"), "{e}");
    }
}
