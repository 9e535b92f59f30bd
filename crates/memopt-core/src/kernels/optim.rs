//! Optimizer steps, in place and without allocation, with `torch.optim`'s semantics: SGD (with
//! momentum, dampening, Nesterov and weight decay) and Adam (L2 weight decay, bias correction).

use crate::backend::{Compute, compute};
use crate::cuda::grid_for;
use crate::cuda::launchers::optim as gpu_k;
use crate::{CoreError, Result, Tensor};
use rayon::prelude::*;

/// Elements per parallel task.
const CHUNK: usize = 1 << 13;

/// Hyper-parameters of SGD, as `torch.optim.SGD` (without `maximize`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SgdConfig {
    /// Learning rate (>= 0).
    pub lr: f32,
    /// Momentum factor (>= 0; 0 disables the momentum buffer).
    pub momentum: f32,
    /// Dampening of the momentum (0 for Nesterov).
    pub dampening: f32,
    /// L2 penalty added to the gradient (>= 0).
    pub weight_decay: f32,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
}

/// Hyper-parameters of Adam, as `torch.optim.Adam` (without `amsgrad`, L2 weight decay).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    /// Learning rate (>= 0).
    pub lr: f32,
    /// Decay of the first moment, in `[0, 1)`.
    pub beta1: f32,
    /// Decay of the second moment, in `[0, 1)`.
    pub beta2: f32,
    /// Term added to the denominator (>= 0).
    pub eps: f32,
    /// L2 penalty added to the gradient (>= 0).
    pub weight_decay: f32,
}

fn nonneg(op: &'static str, name: &str, v: f32) -> Result<()> {
    if v >= 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(CoreError::invalid(
            op,
            format!("{name} must be finite and >= 0, got {v}"),
        ))
    }
}

fn unit(op: &'static str, name: &str, v: f32) -> Result<()> {
    if (0.0..1.0).contains(&v) {
        Ok(())
    } else {
        Err(CoreError::invalid(
            op,
            format!("{name} must be in [0, 1), got {v}"),
        ))
    }
}

/// Checks that every named tensor is f32 with `param`'s shape and device, and that no two share
/// storage (each is locked once; a shared lock would deadlock).
fn check_tensors(op: &'static str, named: &[(&str, &Tensor)]) -> Result<()> {
    let (_, param) = named[0];
    for (i, &(name, t)) in named.iter().enumerate() {
        param.expect_same_device(op, t)?;
        t.expect_dtype(op, crate::DType::F32)?;
        if t.shape() != param.shape() {
            return Err(CoreError::shape(
                op,
                format!("{name} of the parameter's shape {}", param.shape()),
                t.shape(),
            ));
        }
        for &(other, u) in &named[..i] {
            if t.same_storage(u) {
                return Err(CoreError::invalid(
                    op,
                    format!(
                        "{name} and {other} share storage; they are updated in place and must be separate buffers"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// One SGD step on `param` in place (PyTorch semantics): `d = grad + weight_decay * param`; with
/// momentum, `buf = d` on the first step (`first_step`), else `buf = momentum * buf + (1 -
/// dampening) * d`, then `d = d + momentum * buf` (Nesterov) or `d = buf`; finally `param -= lr *
/// d`. `momentum_buf` must be given when momentum != 0 (it is ignored otherwise). No allocation.
pub fn sgd_step(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    cfg: &SgdConfig,
    first_step: bool,
) -> Result<()> {
    const OP: &str = "sgd_step";
    nonneg(OP, "lr", cfg.lr)?;
    nonneg(OP, "momentum", cfg.momentum)?;
    nonneg(OP, "weight_decay", cfg.weight_decay)?;
    if !cfg.dampening.is_finite() {
        return Err(CoreError::invalid(
            OP,
            format!("dampening must be finite, got {}", cfg.dampening),
        ));
    }
    if cfg.nesterov && (cfg.momentum == 0.0 || cfg.dampening != 0.0) {
        return Err(CoreError::invalid(
            OP,
            format!(
                "Nesterov momentum needs momentum > 0 and dampening 0, got momentum {} and dampening {}",
                cfg.momentum, cfg.dampening
            ),
        ));
    }
    let buf = if cfg.momentum != 0.0 {
        match momentum_buf {
            Some(b) => Some(b),
            None => {
                return Err(CoreError::invalid(
                    OP,
                    format!(
                        "momentum {} needs a momentum buffer of the parameter's shape",
                        cfg.momentum
                    ),
                ));
            }
        }
    } else {
        None
    };
    match buf {
        Some(b) => check_tensors(OP, &[("param", param), ("grad", grad), ("momentum buffer", b)])?,
        None => check_tensors(OP, &[("param", param), ("grad", grad)])?,
    }

    let gr = grad.read::<f32>(OP)?;
    let mut pw = param.write::<f32>(OP)?;
    let mut bw = buf.map(|b| b.write::<f32>(OP)).transpose()?;
    let SgdConfig {
        lr,
        momentum,
        dampening,
        weight_decay: wd,
        nesterov,
    } = *cfg;
    let n = param.elem_count() as u64;
    compute(param.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            let (pp, gp, grid) = (pw.cuda_ptr()?, gr.cuda_ptr()?, grid_for(n));
            return match (n, bw.as_mut()) {
                (0, _) => Ok(()),
                (_, Some(b)) => gpu_k::sgd_momentum(
                    gpu,
                    grid,
                    pp,
                    gp,
                    b.cuda_ptr()?,
                    n,
                    lr,
                    momentum,
                    dampening,
                    wd,
                    nesterov as i32,
                    first_step as i32,
                ),
                (_, None) => gpu_k::sgd_plain(gpu, grid, pp, gp, n, lr, wd),
            };
        }
        let (p, g) = (pw.host_mut()?, gr.host()?);
        let keep = 1.0 - dampening;
        let decayed = move |g: f32, p: f32| if wd != 0.0 { g + wd * p } else { g };
        match bw.as_mut().map(|b| b.host_mut()).transpose()? {
            Some(b) => p
                .par_chunks_mut(CHUNK)
                .zip(b.par_chunks_mut(CHUNK))
                .zip(g.par_chunks(CHUNK))
                .for_each(|((p, b), g)| {
                    for ((p, b), &g) in p.iter_mut().zip(b.iter_mut()).zip(g) {
                        let d = decayed(g, *p);
                        *b = if first_step { d } else { *b * momentum + keep * d };
                        let d = if nesterov { d + momentum * *b } else { *b };
                        *p += -lr * d;
                    }
                }),
            None => p
                .par_chunks_mut(CHUNK)
                .zip(g.par_chunks(CHUNK))
                .for_each(|(p, g)| {
                    for (p, &g) in p.iter_mut().zip(g) {
                        *p += -lr * decayed(g, *p);
                    }
                }),
        }
        Ok(())
    })
}

/// `torch.lerp(start, end, weight)` on one value, with PyTorch's two-sided formula.
#[inline]
fn lerp(start: f32, end: f32, weight: f32) -> f32 {
    if weight.abs() < 0.5 {
        start + weight * (end - start)
    } else {
        end - (end - start) * (1.0 - weight)
    }
}

/// The arguments of [`adam_step`].
#[derive(Debug, Clone, Copy)]
pub struct AdamStep<'a> {
    /// The parameter, updated in place.
    pub param: &'a Tensor,
    /// Its gradient.
    pub grad: &'a Tensor,
    /// The first moment buffer (zeros before the first step), updated in place.
    pub m: &'a Tensor,
    /// The second moment buffer (zeros before the first step), updated in place.
    pub v: &'a Tensor,
    /// Learning rate, betas, eps and weight decay.
    pub cfg: &'a AdamConfig,
    /// The step number, counted from 1.
    pub step: u64,
}

/// One Adam step on `param` in place (PyTorch semantics, step counted from 1): `g = grad +
/// weight_decay * param`; `m = lerp(m, g, 1 - beta1)`; `v = beta2 * v + (1 - beta2) * g^2`;
/// `param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)`. `m` and `v` are
/// the moment buffers (zeros before the first step). No allocation.
pub fn adam_step(args: AdamStep<'_>) -> Result<()> {
    let AdamStep {
        param,
        grad,
        m,
        v,
        cfg,
        step,
    } = args;
    const OP: &str = "adam_step";
    nonneg(OP, "lr", cfg.lr)?;
    nonneg(OP, "eps", cfg.eps)?;
    nonneg(OP, "weight_decay", cfg.weight_decay)?;
    unit(OP, "beta1", cfg.beta1)?;
    unit(OP, "beta2", cfg.beta2)?;
    if step == 0 {
        return Err(CoreError::invalid(
            OP,
            "step counts from 1 (the first step is step 1), got 0",
        ));
    }
    check_tensors(
        OP,
        &[
            ("param", param),
            ("grad", grad),
            ("first moment", m),
            ("second moment", v),
        ],
    )?;

    let gr = grad.read::<f32>(OP)?;
    let (mut pw, mut mw, mut vw) = (param.write::<f32>(OP)?, m.write::<f32>(OP)?, v.write::<f32>(OP)?);
    let AdamConfig {
        lr,
        beta1,
        beta2,
        eps,
        weight_decay: wd,
    } = *cfg;
    // Bias corrections in f64, as PyTorch computes them on Python floats (the GPU gets the
    // same rounded scalars).
    let bias_correction1 = 1.0 - (beta1 as f64).powf(step as f64);
    let bias_correction2 = 1.0 - (beta2 as f64).powf(step as f64);
    let step_size = (lr as f64 / bias_correction1) as f32;
    let bc2_sqrt = bias_correction2.sqrt() as f32;
    let (w1, w2) = (1.0 - beta1, 1.0 - beta2);
    let n = param.elem_count() as u64;
    compute(param.device(), |backend| {
        if let Compute::Cuda(gpu) = backend {
            if n == 0 {
                return Ok(());
            }
            let (pp, gp, mp, vp) = (pw.cuda_ptr()?, gr.cuda_ptr()?, mw.cuda_ptr()?, vw.cuda_ptr()?);
            return gpu_k::adam(
                gpu,
                grid_for(n),
                pp,
                gp,
                mp,
                vp,
                n,
                step_size,
                bc2_sqrt,
                beta2,
                eps,
                wd,
                w1,
                w2,
            );
        }
        let (p, g, ms, vs) = (pw.host_mut()?, gr.host()?, mw.host_mut()?, vw.host_mut()?);
        p.par_chunks_mut(CHUNK)
            .zip(ms.par_chunks_mut(CHUNK))
            .zip(vs.par_chunks_mut(CHUNK))
            .zip(g.par_chunks(CHUNK))
            .for_each(|(((p, m), v), g)| {
                for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
                    let g = if wd != 0.0 { g + wd * *p } else { g };
                    *m = lerp(*m, g, w1);
                    *v = *v * beta2 + w2 * g * g;
                    let denom = v.sqrt() / bc2_sqrt + eps;
                    *p += -step_size * (*m / denom);
                }
            });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::kernels::testkit::{assert_close, cpu, record, tensor, values};
    use proptest::prelude::*;

    /// Scalar f64 reference of torch.optim.SGD over several steps; returns (param, buf).
    fn sgd_reference(p0: &[f32], grads: &[Vec<f32>], c: &SgdConfig) -> (Vec<f64>, Vec<f64>) {
        let (lr, mo, da, wd) = (
            c.lr as f64,
            c.momentum as f64,
            c.dampening as f64,
            c.weight_decay as f64,
        );
        let mut p: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        let mut buf = vec![0f64; p.len()];
        for (step, g) in grads.iter().enumerate() {
            for i in 0..p.len() {
                let mut d = g[i] as f64 + wd * p[i];
                if mo != 0.0 {
                    buf[i] = if step == 0 {
                        d
                    } else {
                        mo * buf[i] + (1.0 - da) * d
                    };
                    d = if c.nesterov { d + mo * buf[i] } else { buf[i] };
                }
                p[i] -= lr * d;
            }
        }
        (p, buf)
    }

    /// Scalar f64 reference of torch.optim.Adam over several steps; returns (param, m, v).
    fn adam_reference(p0: &[f32], grads: &[Vec<f32>], c: &AdamConfig) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (lr, b1, b2, eps, wd) = (
            c.lr as f64,
            c.beta1 as f64,
            c.beta2 as f64,
            c.eps as f64,
            c.weight_decay as f64,
        );
        let mut p: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        let (mut m, mut v) = (vec![0f64; p.len()], vec![0f64; p.len()]);
        for (k, g) in grads.iter().enumerate() {
            let t = (k + 1) as i32;
            for i in 0..p.len() {
                let g = g[i] as f64 + wd * p[i];
                m[i] = b1 * m[i] + (1.0 - b1) * g;
                v[i] = b2 * v[i] + (1.0 - b2) * g * g;
                let mhat = m[i] / (1.0 - b1.powi(t));
                let vhat = v[i] / (1.0 - b2.powi(t));
                p[i] -= lr * mhat / (vhat.sqrt() + eps);
            }
        }
        (p, m, v)
    }

    fn sgd_config() -> impl Strategy<Value = SgdConfig> {
        (
            0.001f32..0.5,
            prop_oneof![Just(0.0f32), 0.1f32..0.99],
            0.0f32..0.5,
            prop_oneof![Just(0.0f32), 0.0f32..0.1],
            any::<bool>(),
        )
            .prop_map(|(lr, momentum, dampening, weight_decay, nesterov)| {
                let nesterov = nesterov && momentum > 0.0;
                SgdConfig {
                    lr,
                    momentum,
                    dampening: if nesterov { 0.0 } else { dampening },
                    weight_decay,
                    nesterov,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn sgd_matches_scalar_reference(cfg in sgd_config(), n in 1usize..40, steps in 1usize..5, seed in 0u64..1000) {
            let p0 = values(n, seed);
            let grads: Vec<Vec<f32>> = (0..steps).map(|s| values(n, seed + 100 + s as u64)).collect();
            let (param, buf) = (cpu(&p0, &[n]), cpu(&vec![0.0; n], &[n]));
            for (s, g) in grads.iter().enumerate() {
                sgd_step(&param, &cpu(g, &[n]), Some(&buf), &cfg, s == 0).unwrap();
            }
            let (want_p, want_b) = sgd_reference(&p0, &grads, &cfg);
            assert_close(&param.to_vec_f32().unwrap(), &want_p, 1e-5, 1e-6, "param");
            if cfg.momentum != 0.0 {
                assert_close(&buf.to_vec_f32().unwrap(), &want_b, 1e-5, 1e-6, "momentum buffer");
            } else {
                prop_assert!(buf.to_vec_f32().unwrap().iter().all(|&v| v == 0.0), "buffer untouched without momentum");
            }
        }

        #[test]
        fn adam_matches_scalar_reference(
            lr in 0.0001f32..0.1,
            beta1 in 0.0f32..0.99,
            beta2 in 0.5f32..0.9999,
            eps in prop_oneof![Just(1e-8f32), Just(1e-3f32)],
            weight_decay in prop_oneof![Just(0.0f32), 0.0f32..0.1],
            n in 1usize..40,
            steps in 1usize..6,
            seed in 0u64..1000,
        ) {
            let cfg = AdamConfig { lr, beta1, beta2, eps, weight_decay };
            let p0 = values(n, seed);
            // Gradients away from 0 keep sqrt(v) well above eps, where f32 and f64 agree closely.
            let grads: Vec<Vec<f32>> = (0..steps)
                .map(|s| values(n, seed + 100 + s as u64).iter().map(|g| g + 0.1f32.copysign(*g)).collect())
                .collect();
            let (param, m, v) = (cpu(&p0, &[n]), cpu(&vec![0.0; n], &[n]), cpu(&vec![0.0; n], &[n]));
            for (s, g) in grads.iter().enumerate() {
                crate::kernels::testkit::adam_step_with(&param, &cpu(g, &[n]), &m, &v, &cfg, s as u64 + 1).unwrap();
            }
            let (want_p, want_m, want_v) = adam_reference(&p0, &grads, &cfg);
            assert_close(&m.to_vec_f32().unwrap(), &want_m, 1e-5, 1e-7, "m");
            assert_close(&v.to_vec_f32().unwrap(), &want_v, 1e-5, 1e-9, "v");
            // The step moves param by about lr per step; compare the moves at 1e-4 of lr.
            assert_close(&param.to_vec_f32().unwrap(), &want_p, 1e-6, 1e-4 * lr as f64 * steps as f64 + 1e-6, "param");
        }
    }

    #[test]
    fn first_adam_step_moves_by_lr() {
        // With m = v = 0, the first step is -lr * sign(g) (up to eps).
        let (p, m, v) = (cpu(&[1.0, 1.0], &[2]), cpu(&[0.0; 2], &[2]), cpu(&[0.0; 2], &[2]));
        let cfg = AdamConfig {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        crate::kernels::testkit::adam_step_with(&p, &cpu(&[3.0, -0.5], &[2]), &m, &v, &cfg, 1).unwrap();
        assert_close(&p.to_vec_f32().unwrap(), &[0.99, 1.01], 1e-6, 0.0, "param");
    }

    #[test]
    fn large_tensors_update_every_chunk() {
        let n = 3 * CHUNK + 7;
        let (p, g) = (cpu(&vec![1.0; n], &[n]), cpu(&vec![2.0; n], &[n]));
        let cfg = SgdConfig {
            lr: 0.5,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        };
        sgd_step(&p, &g, None, &cfg, true).unwrap();
        assert!(p.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
    }

    #[test]
    fn steps_allocate_nothing_on_cpu_or_meta() {
        for dev in [Device::Cpu, Device::META] {
            let (events, ()) = record(dev, |dev| {
                let t = |s| tensor(values(64, s), &[8, 8], dev);
                let (p, g, b, m, v) = (t(1), t(2), t(3), t(4), t(5));
                let tracker = crate::MemoryTracker::current(dev);
                let before = tracker.stats().events;
                let sgd = SgdConfig {
                    lr: 0.1,
                    momentum: 0.9,
                    dampening: 0.0,
                    weight_decay: 1e-4,
                    nesterov: true,
                };
                sgd_step(&p, &g, Some(&b), &sgd, false).unwrap();
                let adam = AdamConfig {
                    lr: 1e-3,
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.0,
                };
                crate::kernels::testkit::adam_step_with(&p, &g, &m, &v, &adam, 3).unwrap();
                assert_eq!(
                    tracker.stats().events,
                    before,
                    "{dev}: optimizer steps recorded events"
                );
            });
            assert_eq!(events.len(), 10, "{dev}: five inputs allocated and freed");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let (p, g, b) = (cpu(&[1.0; 4], &[4]), cpu(&[1.0; 4], &[4]), cpu(&[0.0; 4], &[4]));
        let sgd = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        };
        let e = |r: Result<()>| r.unwrap_err().to_string();
        assert!(e(sgd_step(&p, &g, None, &sgd, true)).contains("needs a momentum buffer"));
        assert!(e(sgd_step(&p, &p, Some(&b), &sgd, true)).contains("grad and param share storage"));
        let msg = e(sgd_step(&p, &g, Some(&cpu(&[0.0; 2], &[2])), &sgd, true));
        assert!(
            msg.contains("momentum buffer of the parameter's shape [4]") && msg.contains("got [2]"),
            "{msg}"
        );
        // Disjoint views of one storage are refused too: the storage is locked once per tensor.
        let both = cpu(&[0.0; 8], &[2, 4]);
        let (pv, bv) = (
            both.narrow0(0, 1).unwrap().reshape([4]).unwrap(),
            both.narrow0(1, 1).unwrap().reshape([4]).unwrap(),
        );
        assert!(
            e(sgd_step(&pv, &g, Some(&bv), &sgd, true)).contains("momentum buffer and param share storage")
        );
        assert!(e(sgd_step(&p, &g, Some(&g), &sgd, true)).contains("momentum buffer and grad share storage"));
        let bad = SgdConfig {
            nesterov: true,
            dampening: 0.1,
            ..sgd
        };
        assert!(e(sgd_step(&p, &g, Some(&b), &bad, true)).contains("Nesterov"));
        assert!(
            e(sgd_step(&p, &g, Some(&b), &SgdConfig { lr: -1.0, ..sgd }, true))
                .contains("lr must be finite and >= 0")
        );
        assert!(
            e(sgd_step(&p, &cpu(&[1.0; 3], &[3]), Some(&b), &sgd, true))
                .contains("grad of the parameter's shape [4]")
        );
        let h = g.to_dtype(crate::DType::F16).unwrap();
        assert!(e(sgd_step(&p, &h, Some(&b), &sgd, true)).contains("expected dtype f32, got f16"));

        let adam = AdamConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let (m, v) = (cpu(&[0.0; 4], &[4]), cpu(&[0.0; 4], &[4]));
        assert!(
            e(crate::kernels::testkit::adam_step_with(&p, &g, &m, &v, &adam, 0))
                .contains("step counts from 1")
        );
        assert!(
            e(crate::kernels::testkit::adam_step_with(&p, &g, &m, &m, &adam, 1))
                .contains("second moment and first moment share storage")
        );
        assert!(
            e(crate::kernels::testkit::adam_step_with(
                &p,
                &g,
                &m,
                &v,
                &AdamConfig { beta1: 1.0, ..adam },
                1
            ))
            .contains("beta1 must be in [0, 1)")
        );
        let meta = tensor(vec![0f32; 4], &[4], Device::META);
        assert!(
            e(crate::kernels::testkit::adam_step_with(
                &p, &g, &meta, &v, &adam, 1
            ))
            .contains("different devices")
        );
    }
}
