//! Dropout with a mask drawn from the counter-based RNG ([`RngState::uniform_at`]). The mask is
//! never stored: backward regenerates it from the same state, so replaying a checkpointed
//! segment with its saved [`RngState`] reproduces the forward mask exactly.

use crate::backend::{Compute, Init, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::dropout as gpu_k;
use crate::memory::MemoryKind;
use crate::rng::{RngState, philox4x32_10};
use crate::{CoreError, KernelBuffer, Result, Tensor};
use rayon::prelude::*;

/// Elements per parallel task (a multiple of 4, so tasks start on Philox block boundaries when
/// the state does).
const CHUNK: usize = 1 << 14;

/// Checks `p` and `mask_period` against `n` elements.
fn check(op: &'static str, p: f32, mask_period: usize, n: usize) -> Result<()> {
    if !(0.0..1.0).contains(&p) {
        return Err(CoreError::invalid(op, format!("p must be in [0, 1), got {p}")));
    }
    if mask_period == 0 || !n.is_multiple_of(mask_period) {
        return Err(CoreError::invalid(
            op,
            format!(
                "mask_period {mask_period} must be at least 1 and divide the element count {n} (use {n} for an independent mask, {n} / T for one mask shared over T time steps)"
            ),
        ));
    }
    Ok(())
}

/// `out[k] = src[k] * scale` where mask element `(base + k) % period` is kept, else `src[k] * 0`. Keeps the
/// current Philox block between consecutive values, so each block of four uniforms is computed
/// once; the values are exactly those of [`RngState::uniform_at`].
fn apply_mask(rng: RngState, p: f32, scale: f32, period: usize, base: usize, src: &[f32], out: &mut [f32]) {
    let key = [rng.seed as u32, (rng.seed >> 32) as u32];
    let mut j = base % period;
    let mut block = u64::MAX;
    let mut lanes = [0u32; 4];
    for (o, &v) in out.iter_mut().zip(src) {
        let pos = rng.offset.wrapping_add(j as u64);
        if pos / 4 != block {
            block = pos / 4;
            lanes = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], key);
        }
        let u = (lanes[(pos % 4) as usize] >> 8) as f32 * (1.0 / 16_777_216.0);
        // A multiply by 0 or scale, as PyTorch's `input * mask` (and free of unpredictable
        // branches); non-finite inputs that are dropped give NaN there too.
        *o = v * if u >= p { scale } else { 0.0 };
        j += 1;
        if j == period {
            j = 0;
        }
    }
}

fn masked(
    op: &'static str,
    x: &Tensor,
    p: f32,
    rng: RngState,
    mask_period: usize,
    kind: MemoryKind,
) -> Result<Tensor> {
    check(op, p, mask_period, x.elem_count())?;
    let xr = x.read::<f32>(op)?;
    let mut out = KernelBuffer::<f32>::new(op, x.device(), x.elem_count(), kind, Init::Overwritten)?;
    let scale = 1.0 / (1.0 - p);
    let n = x.elem_count() as u64;
    compute(x.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            // The same Philox positions as the CPU: offset + (i mod period), wrapping.
            let (xp, period) = (xr.cuda_ptr()?, mask_period as u64);
            return match n {
                0 => Ok(()),
                _ => gpu_k::dropout_mask(
                    gpu,
                    grid_for(n),
                    xp,
                    n,
                    rng.seed,
                    rng.offset,
                    period,
                    p,
                    scale,
                    out.cuda_ptr()?,
                ),
            };
        }
        let (xs, os) = (xr.host()?, out.host_mut()?);
        os.par_chunks_mut(CHUNK)
            .zip(xs.par_chunks(CHUNK))
            .enumerate()
            .for_each(|(c, (o, s))| apply_mask(rng, p, scale, mask_period, c * CHUNK, s, o));
        Ok(())
    })?;
    out.into_tensor(x.shape().clone())
}

/// Dropout in training mode: element `i` is kept iff `rng.uniform_at((i % mask_period) as u64) >=
/// p`, and kept elements are scaled by `1 / (1 - p)`. `mask_period` = element count gives an
/// independent mask; element count / T gives one mask shared over T time steps of a `[T, ...]`
/// tensor (SpikingJelly's multi-step Dropout). `p` must be in `[0, 1)` and `mask_period` must
/// divide the element count. The output is not a spike tensor; kind Activation.
pub fn dropout(x: &Tensor, p: f32, rng: RngState, mask_period: usize) -> Result<Tensor> {
    masked("dropout", x, p, rng, mask_period, MemoryKind::Activation)
}

/// Backward of [`dropout`] with the same `p`, `rng` and `mask_period`: the gradient through the
/// regenerated mask, scaled by `1 / (1 - p)`. Kind Gradient.
pub fn dropout_backward(grad: &Tensor, p: f32, rng: RngState, mask_period: usize) -> Result<Tensor> {
    masked(
        "dropout_backward",
        grad,
        p,
        rng,
        mask_period,
        MemoryKind::Gradient,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testkit::{assert_meta_matches_cpu, cpu, tensor, values};
    use crate::{Device, Philox};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn matches_naive_and_backward_uses_the_same_mask(
            t in 1usize..5,
            inner in 1usize..300,
            p in 0.0f32..0.95,
            seed in any::<u64>(),
            offset in any::<u64>(),
            shared in any::<bool>(),
        ) {
            let n = t * inner;
            let period = if shared { inner } else { n };
            let rng = RngState { seed, offset };
            let x: Vec<f32> = values(n, seed ^ 1).iter().map(|v| v + 2.0).collect(); // never 0
            let y = dropout(&cpu(&x, &[t, inner]).with_spike_flag(true), p, rng, period).unwrap();
            prop_assert!(!y.is_spike());
            prop_assert_eq!(y.kind(), MemoryKind::Activation);
            let g = values(n, seed ^ 2);
            let gx = dropout_backward(&cpu(&g, &[t, inner]), p, rng, period).unwrap();
            prop_assert_eq!(gx.kind(), MemoryKind::Gradient);
            let (ys, gs) = (y.to_vec_f32().unwrap(), gx.to_vec_f32().unwrap());
            let scale = 1.0 / (1.0 - p);
            for i in 0..n {
                let keep = rng.uniform_at((i % period) as u64) >= p;
                prop_assert_eq!(ys[i], if keep { x[i] * scale } else { 0.0 });
                prop_assert_eq!(gs[i], if keep { g[i] * scale } else { 0.0 });
            }
        }
    }

    #[test]
    fn same_state_same_mask_and_shared_mask_is_shared() {
        let (t, inner) = (4, 50_000); // several parallel chunks
        let x = cpu(&vec![1.0; t * inner], &[t, inner]);
        let mut g = Philox::new(42);
        let _ = g.reserve(13);
        let state = g.state();
        let a = dropout(&x, 0.3, state, t * inner).unwrap().to_vec_f32().unwrap();
        let b = dropout(&x, 0.3, state, t * inner).unwrap().to_vec_f32().unwrap();
        assert_eq!(a, b);
        let other = RngState {
            seed: 43,
            offset: state.offset,
        };
        assert_ne!(
            a,
            dropout(&x, 0.3, other, t * inner).unwrap().to_vec_f32().unwrap()
        );
        // Independent: time steps differ. Shared: every time step repeats the first.
        assert_ne!(a[..inner], a[inner..2 * inner]);
        let s = dropout(&x, 0.3, state, inner).unwrap().to_vec_f32().unwrap();
        for step in 1..t {
            assert_eq!(s[..inner], s[step * inner..(step + 1) * inner]);
        }
        assert_eq!(
            s[..inner],
            a[..inner],
            "the shared mask is the first step of the independent one"
        );
    }

    #[test]
    fn keep_rate_is_one_minus_p() {
        let n = 200_000;
        let x = cpu(&vec![1.0; n], &[n]);
        for p in [0.0f32, 0.1, 0.5, 0.9] {
            let y = dropout(&x, p, RngState { seed: 7, offset: 0 }, n)
                .unwrap()
                .to_vec_f32()
                .unwrap();
            let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
            // Binomial standard deviation is at most 0.0012 here; allow 5 sigma.
            assert!((kept - (1.0 - p as f64)).abs() < 0.006, "p {p}: kept {kept}");
            let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            assert!((mean - 1.0).abs() < 0.06, "p {p}: mean {mean}");
        }
    }

    #[test]
    fn block_cache_matches_uniform_at_across_offsets_and_wraparound() {
        for offset in [0u64, 1, 2, 3, 5, u64::MAX - 6] {
            let rng = RngState {
                seed: 0xDEAD_BEEF_1234,
                offset,
            };
            let src = vec![1.0f32; 23];
            let mut out = vec![0f32; 23];
            // p = 0.5 with scale 1 makes out[k] the indicator of uniform_at(k) >= 0.5.
            apply_mask(rng, 0.5, 1.0, 23, 0, &src, &mut out);
            for (k, &o) in out.iter().enumerate() {
                assert_eq!(o == 1.0, rng.uniform_at(k as u64) >= 0.5, "offset {offset} k {k}");
            }
        }
    }

    #[test]
    fn meta_records_the_same_events_as_cpu() {
        assert_meta_matches_cpu(|dev| {
            let x = tensor(values(6 * 1000, 1), &[6, 1000], dev);
            let rng = RngState { seed: 1, offset: 8 };
            let y = dropout(&x, 0.2, rng, 1000).unwrap();
            let g = dropout_backward(&x, 0.2, rng, 6000).unwrap();
            vec![y.dims().to_vec(), g.dims().to_vec()]
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let x = cpu(&[1.0; 6], &[2, 3]);
        let rng = RngState { seed: 0, offset: 0 };
        for p in [1.0, -0.1, f32::NAN] {
            let e = dropout(&x, p, rng, 6).unwrap_err().to_string();
            assert!(e.contains("dropout") && e.contains("[0, 1)"), "{e}");
        }
        let e = dropout_backward(&x, 0.5, rng, 4).unwrap_err().to_string();
        assert!(
            e.contains("mask_period 4") && e.contains("divide the element count 6"),
            "{e}"
        );
        assert!(dropout(&x, 0.5, rng, 0).is_err());
        let i = tensor(vec![1i64; 6], &[6], Device::Cpu);
        assert!(
            dropout(&i, 0.5, rng, 6)
                .unwrap_err()
                .to_string()
                .contains("expected dtype f32")
        );
    }
}
