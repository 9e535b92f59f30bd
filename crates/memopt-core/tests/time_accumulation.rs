//! The `_acc` backward kernels add weight and bias gradients one time step at a time, last step
//! first: processing the time steps in two chunks (second chunk first) must give bitwise the
//! same accumulators and input gradients as one whole pass, and the same values (up to
//! rounding) as the plain backward kernels.

use memopt_core::kernels::{self, Conv2dParams, GradNeeds, WeightGradAcc};
use memopt_core::{DType, Device, MemoryKind, Philox, Tensor};

fn rand(dims: &[usize], rng: &mut Philox) -> Tensor {
    Tensor::rand_uniform(dims, -1.0, 1.0, rng, Device::Cpu, MemoryKind::Input).unwrap()
}

fn zeros(dims: &[usize]) -> Tensor {
    Tensor::zeros(dims, DType::F32, Device::Cpu, MemoryKind::Gradient).unwrap()
}

fn close(a: &Tensor, b: &Tensor) {
    for (x, y) in a.to_vec_f32().unwrap().iter().zip(b.to_vec_f32().unwrap()) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn linear_accumulates_identically_in_time_chunks() {
    let mut rng = Philox::new(1);
    let (t, n, k, o) = (6, 3, 37, 29);
    let x = rand(&[t, n, k], &mut rng);
    let w = rand(&[o, k], &mut rng);
    let g = rand(&[t, n, o], &mut rng);
    let (aw, ab) = (zeros(&[o, k]), zeros(&[o]));
    let acc = |w_acc, b_acc, steps| WeightGradAcc {
        weight: Some(w_acc),
        bias: Some(b_acc),
        time_steps: steps,
    };
    let gx = linear_acc(&g, &x, &w, acc(&aw, &ab, t), true).unwrap().unwrap();

    let (cw, cb) = (zeros(&[o, k]), zeros(&[o]));
    let split = 4;
    let part = |v: &Tensor, s, l| v.narrow0(s, l).unwrap();
    let gx2 = linear_acc(
        &part(&g, split, t - split),
        &part(&x, split, t - split),
        &w,
        acc(&cw, &cb, t - split),
        true,
    )
    .unwrap()
    .unwrap();
    let gx1 = linear_acc(
        &part(&g, 0, split),
        &part(&x, 0, split),
        &w,
        acc(&cw, &cb, split),
        true,
    )
    .unwrap()
    .unwrap();
    assert_eq!(cw.to_vec_f32().unwrap(), aw.to_vec_f32().unwrap());
    assert_eq!(cb.to_vec_f32().unwrap(), ab.to_vec_f32().unwrap());
    assert_eq!(
        [gx1.to_vec_f32().unwrap(), gx2.to_vec_f32().unwrap()].concat(),
        gx.to_vec_f32().unwrap()
    );

    let plain = kernels::linear_backward(kernels::LinearBackward {
        grad: &g,
        x: &x,
        w: &w,
        has_bias: true,
        needs: GradNeeds::ALL,
        acc: None,
    })
    .unwrap();
    close(&aw, plain.w.as_ref().unwrap());
    close(&ab, plain.b.as_ref().unwrap());
    close(&gx, plain.x.as_ref().unwrap());
}

#[test]
fn conv_accumulates_identically_in_time_chunks() {
    let mut rng = Philox::new(2);
    let (t, n, c, co, h) = (5, 2, 3, 4, 7);
    let p = Conv2dParams {
        padding: [1, 1],
        stride: [2, 1],
        ..Conv2dParams::default()
    };
    let x = rand(&[t * n, c, h, h], &mut rng);
    let w = rand(&[co, c, 3, 3], &mut rng);
    let y = kernels::conv2d(&x, &w, None, &p, 1).unwrap();
    let g = rand(y.dims(), &mut rng);
    let acc = |w_acc, b_acc, steps| WeightGradAcc {
        weight: Some(w_acc),
        bias: Some(b_acc),
        time_steps: steps,
    };
    let (aw, ab) = (zeros(w.dims()), zeros(&[co]));
    let gx = conv_acc(&g, &x, &w, &p, acc(&aw, &ab, t), true).unwrap().unwrap();

    let (cw, cb) = (zeros(w.dims()), zeros(&[co]));
    let split = 2;
    let part = |v: &Tensor, s: usize, l: usize| v.narrow0(s * n, l * n).unwrap();
    let gx2 = conv_acc(
        &part(&g, split, t - split),
        &part(&x, split, t - split),
        &w,
        &p,
        acc(&cw, &cb, t - split),
        true,
    )
    .unwrap()
    .unwrap();
    let gx1 = conv_acc(
        &part(&g, 0, split),
        &part(&x, 0, split),
        &w,
        &p,
        acc(&cw, &cb, split),
        true,
    )
    .unwrap()
    .unwrap();
    assert_eq!(cw.to_vec_f32().unwrap(), aw.to_vec_f32().unwrap());
    assert_eq!(cb.to_vec_f32().unwrap(), ab.to_vec_f32().unwrap());
    assert_eq!(
        [gx1.to_vec_f32().unwrap(), gx2.to_vec_f32().unwrap()].concat(),
        gx.to_vec_f32().unwrap()
    );

    let plain = kernels::conv2d_backward(kernels::Conv2dBackward {
        grad: &g,
        x: &x,
        w: &w,
        has_bias: true,
        params: &p,
        needs: GradNeeds::ALL,
        acc: None,
    })
    .unwrap();
    close(&aw, plain.w.as_ref().unwrap());
    close(&ab, plain.b.as_ref().unwrap());
    close(&gx, plain.x.as_ref().unwrap());
}

#[test]
fn accumulator_errors_name_the_problem() {
    let mut rng = Philox::new(3);
    let x = rand(&[6, 4], &mut rng);
    let w = rand(&[3, 4], &mut rng);
    let g = rand(&[6, 3], &mut rng);
    let bad_steps = WeightGradAcc {
        weight: None,
        bias: None,
        time_steps: 4,
    };
    let e = linear_acc(&g, &x, &w, bad_steps, true).unwrap_err().to_string();
    assert!(e.contains("time_steps = 4") && e.contains("divide"), "{e}");
    let wrong = zeros(&[4, 3]);
    let bad_shape = WeightGradAcc {
        weight: Some(&wrong),
        bias: None,
        time_steps: 2,
    };
    let e = linear_acc(&g, &x, &w, bad_shape, true).unwrap_err().to_string();
    assert!(e.contains("accumulator") && e.contains("[3, 4]"), "{e}");
    let aliased = WeightGradAcc {
        weight: Some(&w),
        bias: None,
        time_steps: 1,
    };
    assert!(linear_acc(&g, &x, &w, aliased, true).is_err());
}

/// The input gradient of [`kernels::linear_backward`] with the accumulators `acc`.
fn linear_acc(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    acc: WeightGradAcc<'_>,
    input: bool,
) -> memopt_core::Result<Option<Tensor>> {
    let needs = GradNeeds {
        input,
        weight: false,
        bias: false,
    };
    let args = kernels::LinearBackward {
        grad,
        x,
        w,
        has_bias: false,
        needs,
        acc: Some(acc),
    };
    Ok(kernels::linear_backward(args)?.x)
}

/// The input gradient of [`kernels::conv2d_backward`] with the accumulators `acc`.
fn conv_acc(
    grad: &Tensor,
    x: &Tensor,
    w: &Tensor,
    params: &Conv2dParams,
    acc: WeightGradAcc<'_>,
    input: bool,
) -> memopt_core::Result<Option<Tensor>> {
    let needs = GradNeeds {
        input,
        weight: false,
        bias: false,
    };
    let args = kernels::Conv2dBackward {
        grad,
        x,
        w,
        has_bias: false,
        params,
        needs,
        acc: Some(acc),
    };
    Ok(kernels::conv2d_backward(args)?.x)
}
