//! Losses: cross-entropy over class logits and mean squared error, with their backward functions.
//! Losses are scalars (shape `[]`) accumulated in f64 in a fixed order.

use super::accum::{BLOCK, BlockedSum, sum_zip_f64};
use super::par::map2;
use crate::backend::{Compute, Init, compute};
use crate::cuda::launchers::loss as gpu_k;
use crate::cuda::{grid_for, read_back};
use crate::memory::MemoryKind;
use crate::{CoreError, KernelBuffer, Result, Shape, Tensor};
use rayon::prelude::*;

/// Checks logits `[N, C]` and labels i64 `[N]`; returns `(N, C)`.
fn check_ce(op: &'static str, logits: &Tensor, labels: &Tensor) -> Result<(usize, usize)> {
    let &[n, c] = logits.dims() else {
        return Err(CoreError::shape(op, "logits of shape [N, C]", logits.shape()));
    };
    if c == 0 {
        return Err(CoreError::shape(
            op,
            "logits with at least one class",
            logits.shape(),
        ));
    }
    logits.expect_same_device(op, labels)?;
    if labels.dims() != [n] {
        return Err(CoreError::shape(
            op,
            format!("labels of shape [{n}] (one per row of logits {})", logits.shape()),
            labels.shape(),
        ));
    }
    Ok((n, c))
}

/// Checks that every label is a class index in `0..c` (on the CPU; Meta has no labels to check).
fn check_labels(op: &'static str, labels: &[i64], c: usize) -> Result<()> {
    match labels.iter().position(|&l| l < 0 || l as u64 >= c as u64) {
        Some(i) => Err(CoreError::invalid(
            op,
            format!(
                "label {} at position {i} is not a class index: valid labels are 0..{c}",
                labels[i]
            ),
        )),
        None => Ok(()),
    }
}

/// Checks the labels of `labels` (read with `yr`) on `labels`' device: on a GPU they are copied
/// back (N values, untracked) and checked on the host before any kernel reads them.
fn check_device_labels(
    op: &'static str,
    labels: &Tensor,
    yr: &crate::DataRead<'_, i64>,
    c: usize,
) -> Result<()> {
    compute(labels.device(), |backend| match backend {
        Compute::Cpu => check_labels(op, yr.host()?, c),
        Compute::Cuda(gpu) => check_labels(
            op,
            &read_back::<i64>(gpu, yr.cuda_ptr()?, labels.elem_count())?,
            c,
        ),
    })
}

/// `(max, log(sum(exp(row - max))))` of one row, in f64.
fn log_sum_exp(row: &[f32]) -> (f64, f64) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    (max, sum.ln())
}

/// Cross-entropy of `logits` `[N, C]` against class `labels` (i64 `[N]`): the mean over the N rows
/// of `-log softmax(row)[label]`, as PyTorch's `cross_entropy` with mean reduction (NaN for N = 0).
/// A label outside `0..C` is an error naming it (checked on the CPU; Meta has no labels).
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    const OP: &str = "cross_entropy";
    let (n, c) = check_ce(OP, logits, labels)?;
    let (lr, yr) = (logits.read::<f32>(OP)?, labels.read::<i64>(OP)?);
    check_device_labels(OP, labels, &yr, c)?;
    let mut out =
        KernelBuffer::<f32>::new(OP, logits.device(), 1, MemoryKind::Activation, Init::Overwritten)?;
    let mut sum = BlockedSum::new(OP, logits.device(), n, logits.device().target().sum_block() / c)?;
    compute(logits.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            // One thread per block of rows, rows in order within it (the CPU's blocks).
            let (xp, yp, op) = (lr.cuda_ptr()?, yr.cuda_ptr()?, out.cuda_ptr()?);
            let (n64, c64, rows) = (n as u64, c as u64, sum.block() as u64);
            return sum.run_cuda(
                gpu,
                1,
                |parts, grid| gpu_k::ce_blocks(gpu, grid, xp, yp, n64, c64, rows, parts, op),
                (1.0, n as f64),
                op,
            );
        }
        let (xs, ys, o) = (lr.host()?, yr.host()?, out.host_mut()?);
        let total = sum.run(|rows| {
            rows.map(|i| {
                let row = &xs[i * c..(i + 1) * c];
                let (max, lse) = log_sum_exp(row);
                max + lse - row[ys[i] as usize] as f64
            })
            .sum()
        })?;
        o[0] = (total / n as f64) as f32;
        Ok(())
    })?;
    drop(sum);
    out.into_tensor(Shape::scalar())
}

/// Backward of [`cross_entropy`]: `grad_loss * (softmax(row) - onehot(label)) / N` for each row,
/// shape `[N, C]`, kind Gradient.
pub fn cross_entropy_backward(grad_loss: &Tensor, logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    const OP: &str = "cross_entropy_backward";
    let (n, c) = check_ce(OP, logits, labels)?;
    check_scalar_grad(OP, grad_loss, logits)?;
    let (gr, lr, yr) = (
        grad_loss.read::<f32>(OP)?,
        logits.read::<f32>(OP)?,
        labels.read::<i64>(OP)?,
    );
    check_device_labels(OP, labels, &yr, c)?;
    let mut out = KernelBuffer::<f32>::new(
        OP,
        logits.device(),
        n * c,
        MemoryKind::Gradient,
        Init::Overwritten,
    )?;
    compute(logits.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            if n == 0 {
                return Ok(());
            }
            let (gp, xp, yp) = (gr.cuda_ptr()?, lr.cuda_ptr()?, yr.cuda_ptr()?);
            return gpu_k::ce_backward(
                gpu,
                grid_for(n as u64),
                gp,
                xp,
                yp,
                n as u64,
                c as u64,
                out.cuda_ptr()?,
            );
        }
        let (g, xs, ys, os) = (gr.host()?, lr.host()?, yr.host()?, out.host_mut()?);
        let scale = g[0] as f64 / n as f64;
        let rows_per_task = (BLOCK / c).max(1);
        os.par_chunks_mut(c)
            .zip(xs.par_chunks(c))
            .zip(ys.par_iter())
            .with_min_len(rows_per_task)
            .for_each(|((o, row), &label)| {
                let (max, lse) = log_sum_exp(row);
                for (j, (o, &v)) in o.iter_mut().zip(row).enumerate() {
                    let p = (v as f64 - max - lse).exp();
                    let t = if j as i64 == label { 1.0 } else { 0.0 };
                    *o = ((p - t) * scale) as f32;
                }
            });
        Ok(())
    })?;
    out.into_tensor(logits.shape().clone())
}

fn check_scalar_grad(op: &'static str, grad: &Tensor, like: &Tensor) -> Result<()> {
    like.expect_same_device(op, grad)?;
    if grad.elem_count() != 1 {
        return Err(CoreError::shape(
            op,
            "a scalar loss gradient (one element)",
            grad.shape(),
        ));
    }
    Ok(())
}

fn check_pair(op: &'static str, pred: &Tensor, target: &Tensor) -> Result<()> {
    pred.expect_same_device(op, target)?;
    if pred.shape() != target.shape() {
        return Err(CoreError::shape(
            op,
            format!("target of the prediction's shape {}", pred.shape()),
            target.shape(),
        ));
    }
    Ok(())
}

/// Mean squared error: the mean over all elements of `(pred - target)^2`, as a scalar, accumulated
/// in f64 (NaN for empty tensors, as in PyTorch).
pub fn mse(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    const OP: &str = "mse";
    check_pair(OP, pred, target)?;
    let (pr, tr) = (pred.read::<f32>(OP)?, target.read::<f32>(OP)?);
    let n = pred.elem_count();
    let mut out = KernelBuffer::<f32>::new(OP, pred.device(), 1, MemoryKind::Activation, Init::Overwritten)?;
    let mut sum = BlockedSum::new(OP, pred.device(), n, pred.device().target().sum_block())?;
    compute(pred.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (pp, tp, op) = (pr.cuda_ptr()?, tr.cuda_ptr()?, out.cuda_ptr()?);
            let (n64, block) = (n as u64, sum.block() as u64);
            return sum.run_cuda(
                gpu,
                8,
                |parts, grid| gpu_k::mse_blocks(gpu, grid, pp, tp, n64, block, parts, op),
                (1.0, n as f64),
                op,
            );
        }
        let (p, t, o) = (pr.host()?, tr.host()?, out.host_mut()?);
        let total = sum.run(|r| {
            sum_zip_f64(&p[r.clone()], &t[r], |a, b| {
                let d = a as f64 - b as f64;
                d * d
            })
        })?;
        o[0] = (total / n as f64) as f32;
        Ok(())
    })?;
    drop(sum);
    out.into_tensor(Shape::scalar())
}

/// Backward of [`mse`] with respect to `pred`: `grad_loss * 2 * (pred - target) / n`, kind
/// Gradient.
pub fn mse_backward(grad_loss: &Tensor, pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    const OP: &str = "mse_backward";
    check_pair(OP, pred, target)?;
    check_scalar_grad(OP, grad_loss, pred)?;
    let (gr, pr, tr) = (
        grad_loss.read::<f32>(OP)?,
        pred.read::<f32>(OP)?,
        target.read::<f32>(OP)?,
    );
    let n = pred.elem_count();
    let mut out = KernelBuffer::<f32>::new(OP, pred.device(), n, MemoryKind::Gradient, Init::Overwritten)?;
    compute(pred.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            if n == 0 {
                return Ok(());
            }
            let (gp, pp, tp) = (gr.cuda_ptr()?, pr.cuda_ptr()?, tr.cuda_ptr()?);
            return gpu_k::mse_backward(gpu, grid_for(n as u64), gp, pp, tp, n as u64, out.cuda_ptr()?);
        }
        let (g, p, t, os) = (gr.host()?, pr.host()?, tr.host()?, out.host_mut()?);
        let k = (2.0 * g[0] as f64 / n as f64) as f32;
        map2(p, t, os, |a, b| k * (a - b));
        Ok(())
    })?;
    out.into_tensor(pred.shape().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::kernels::testkit::{assert_close, assert_meta_matches_cpu, central_diff, cpu, tensor, values};
    use proptest::prelude::*;

    fn ce_case() -> impl Strategy<Value = (usize, usize, Vec<f32>, Vec<i64>)> {
        (1usize..6, 1usize..7).prop_flat_map(|(n, c)| {
            (
                Just(n),
                Just(c),
                prop::collection::vec(-6.0f32..6.0, n * c),
                prop::collection::vec(0..c as i64, n),
            )
        })
    }

    fn naive_ce(x: &[f32], y: &[i64], n: usize, c: usize) -> (f64, Vec<f64>) {
        let mut loss = 0.0;
        let mut grad = vec![0.0; n * c];
        for i in 0..n {
            let row: Vec<f64> = x[i * c..(i + 1) * c].iter().map(|&v| v as f64).collect();
            let z: f64 = row.iter().map(|v| v.exp()).sum();
            loss -= (row[y[i] as usize].exp() / z).ln();
            for j in 0..c {
                let t = if j as i64 == y[i] { 1.0 } else { 0.0 };
                grad[i * c + j] = (row[j].exp() / z - t) / n as f64;
            }
        }
        (loss / n as f64, grad)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn cross_entropy_matches_naive((n, c, x, y) in ce_case(), g in -2.0f32..2.0) {
            let (logits, labels) = (cpu(&x, &[n, c]), tensor(y.clone(), &[n], Device::Cpu));
            let (want, want_grad) = naive_ce(&x, &y, n, c);
            let l = cross_entropy(&logits, &labels).unwrap();
            prop_assert_eq!(l.dims(), &[] as &[usize]);
            assert_close(&l.to_vec_f32().unwrap(), &[want], 1e-6, 1e-6, "loss");
            let gl = cpu(&[g], &[]);
            let gx = cross_entropy_backward(&gl, &logits, &labels).unwrap();
            prop_assert_eq!(gx.kind(), MemoryKind::Gradient);
            let want_grad: Vec<f64> = want_grad.iter().map(|v| v * g as f64).collect();
            assert_close(&gx.to_vec_f32().unwrap(), &want_grad, 1e-5, 1e-7, "grad");
        }

        #[test]
        fn mse_matches_naive(x in prop::collection::vec((-5.0f32..5.0, -5.0f32..5.0), 1..40), g in -2.0f32..2.0) {
            let (p, t): (Vec<f32>, Vec<f32>) = x.into_iter().unzip();
            let n = p.len();
            let want = p.iter().zip(&t).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum::<f64>() / n as f64;
            let (pt, tt) = (cpu(&p, &[n]), cpu(&t, &[n]));
            assert_close(&mse(&pt, &tt).unwrap().to_vec_f32().unwrap(), &[want], 1e-6, 1e-6, "mse");
            let want_grad: Vec<f64> = p.iter().zip(&t).map(|(&a, &b)| 2.0 * g as f64 * (a as f64 - b as f64) / n as f64).collect();
            let gp = mse_backward(&cpu(&[g], &[]), &pt, &tt).unwrap();
            assert_close(&gp.to_vec_f32().unwrap(), &want_grad, 1e-5, 1e-6, "mse grad");
        }
    }

    #[test]
    fn extreme_logits_stay_finite() {
        let logits = cpu(&[1000.0, -1000.0, 0.0, 0.0], &[2, 2]);
        let labels = tensor(vec![1i64, 0], &[2], Device::Cpu);
        let l = cross_entropy(&logits, &labels).unwrap().to_scalar_f32().unwrap();
        assert!((l as f64 - (2000.0 + 2f64.ln()) / 2.0).abs() < 1e-3, "{l}");
        let g = cross_entropy_backward(&cpu(&[1.0], &[]), &logits, &labels).unwrap();
        assert_close(
            &g.to_vec_f32().unwrap(),
            &[0.5, -0.5, -0.25, 0.25],
            1e-6,
            1e-7,
            "grad",
        );
    }

    #[test]
    fn backward_matches_finite_differences() {
        let (n, c) = (3, 4);
        let x = values(n * c, 3).iter().map(|v| v * 3.0).collect::<Vec<_>>();
        let labels = tensor(vec![2i64, 0, 3], &[n], Device::Cpu);
        let fd = central_diff(&x, 1e-2, |v| {
            cross_entropy(&cpu(v, &[n, c]), &labels)
                .unwrap()
                .to_scalar_f32()
                .unwrap() as f64
        });
        let g = cross_entropy_backward(&cpu(&[1.0], &[]), &cpu(&x, &[n, c]), &labels).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-2, 2e-4, "ce backward");

        let t = values(12, 4);
        let tt = cpu(&t, &[3, 4]);
        let fd = central_diff(&x, 1e-2, |v| {
            mse(&cpu(v, &[3, 4]), &tt).unwrap().to_scalar_f32().unwrap() as f64
        });
        let g = mse_backward(&cpu(&[1.0], &[]), &cpu(&x, &[3, 4]), &tt).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-2, 2e-4, "mse backward");
    }

    #[test]
    fn large_batches_are_deterministic() {
        let (n, c) = (5000, 10); // several blocks of rows
        let x = values(n * c, 8);
        let y: Vec<i64> = (0..n as i64).map(|i| i % c as i64).collect();
        let (logits, labels) = (cpu(&x, &[n, c]), tensor(y.clone(), &[n], Device::Cpu));
        let a = cross_entropy(&logits, &labels).unwrap().to_scalar_f32().unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let b = pool.install(|| cross_entropy(&logits, &labels).unwrap().to_scalar_f32().unwrap());
        assert_eq!(a.to_bits(), b.to_bits());
        let (want, _) = naive_ce(&x, &y, n, c);
        assert!((a as f64 - want).abs() < 1e-6 * want.abs(), "{a} vs {want}");
    }

    #[test]
    fn meta_records_the_same_events_as_cpu() {
        assert_meta_matches_cpu(|dev| {
            let (n, c) = (5000, 10);
            let logits = tensor(values(n * c, 1), &[n, c], dev);
            let labels = tensor((0..n as i64).map(|i| i % 10).collect(), &[n], dev);
            let p = tensor(values(50_000, 2), &[50, 1000], dev);
            let t = tensor(values(50_000, 3), &[50, 1000], dev);
            let g = tensor(vec![1.0f32], &[], dev);
            let outs = [
                cross_entropy(&logits, &labels).unwrap(),
                cross_entropy_backward(&g, &logits, &labels).unwrap(),
                mse(&p, &t).unwrap(),
                mse_backward(&g, &p, &t).unwrap(),
            ];
            outs.iter().map(|o| o.dims().to_vec()).collect()
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let logits = cpu(&[0.0; 6], &[2, 3]);
        let bad = tensor(vec![1i64, 3], &[2], Device::Cpu);
        let e = cross_entropy(&logits, &bad).unwrap_err().to_string();
        assert!(e.contains("label 3 at position 1") && e.contains("0..3"), "{e}");
        let neg = tensor(vec![-1i64, 0], &[2], Device::Cpu);
        let g = cpu(&[1.0], &[]);
        let e = cross_entropy_backward(&g, &logits, &neg).unwrap_err().to_string();
        assert!(e.contains("label -1"), "{e}");
        let e = cross_entropy(&logits, &tensor(vec![0i64; 3], &[3], Device::Cpu))
            .unwrap_err()
            .to_string();
        assert!(e.contains("labels of shape [2]") && e.contains("got [3]"), "{e}");
        let e = cross_entropy(&logits, &cpu(&[0.0, 1.0], &[2]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected dtype i64, got f32"), "{e}");
        assert!(cross_entropy(&cpu(&[0.0; 6], &[6]), &bad).is_err());
        let e = mse(&logits, &cpu(&[0.0; 6], &[6])).unwrap_err().to_string();
        assert!(
            e.contains("mse") && e.contains("[2, 3]") && e.contains("[6]"),
            "{e}"
        );
        let e = mse_backward(&logits, &logits, &logits).unwrap_err().to_string();
        assert!(e.contains("scalar loss gradient"), "{e}");
        // Meta labels cannot be checked, but shapes still are.
        let ml = tensor(vec![7i64, 9], &[2], Device::META);
        let mx = tensor(vec![0f32; 6], &[2, 3], Device::META);
        assert!(cross_entropy(&mx, &ml).is_ok());
    }
}
