//! Throughput of the BatchNorm, pooling, dropout and reduction kernels on the activation shape
//! of the CIFAR10-DVS VGG (`[80, 128, 48, 48]`, T*N = 80), next to a plain copy of the same
//! tensor (`copy_as`, memory-bound) as the baseline to compare against in the same run.
//!
//! Run: `cargo bench -p memopt-core --bench ops_kernels -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, criterion_group, criterion_main};
use memopt_core::kernels::{self, GradNeeds, Pool2dParams, RunningStats};
use memopt_core::{Device, MemoryKind, Philox, RngState, Tensor};
use std::hint::black_box;

const DIMS: [usize; 4] = [80, 128, 48, 48];

fn input(seed: u64) -> Tensor {
    let mut rng = Philox::new(seed);
    Tensor::rand_uniform(DIMS, -1.0, 1.0, &mut rng, Device::Cpu, MemoryKind::Input).unwrap()
}

fn bench(c: &mut Criterion) {
    let x = input(1);
    let g = input(2);
    let ch = |v: f32| Tensor::full([DIMS[1]], v, Device::Cpu, MemoryKind::Parameter).unwrap();
    let (w, b, rm, rv) = (ch(1.0), ch(0.0), ch(0.0), ch(1.0));
    let mut group = c.benchmark_group(format!("ops_80x128x48x48_{}", memopt_core::CpuIsa::selected()));
    group.sample_size(10);
    group.bench_function("copy_as (baseline)", |bch| {
        bch.iter(|| black_box(kernels::copy_as(&x, MemoryKind::Activation).unwrap()))
    });
    group.bench_function("batch_norm_train", |bch| {
        bch.iter(|| {
            let running = RunningStats { mean: &rm, var: &rv };
            black_box(
                kernels::batch_norm_train(kernels::BatchNormTrain {
                    x: &x,
                    weight: Some(&w),
                    bias: Some(&b),
                    running: Some(running),
                    momentum: 0.1,
                    eps: 1e-5,
                })
                .unwrap(),
            )
        })
    });
    let fwd = kernels::batch_norm_train(kernels::BatchNormTrain {
        x: &x,
        weight: Some(&w),
        bias: Some(&b),
        running: None,
        momentum: 0.1,
        eps: 1e-5,
    })
    .unwrap();
    group.bench_function("batch_norm_backward", |bch| {
        bch.iter(|| {
            black_box(
                kernels::batch_norm_backward(kernels::BatchNormBackward {
                    grad_y: (&g).into(),
                    x: &x,
                    weight: Some(&w),
                    save_mean: &fwd.save_mean,
                    save_invstd: &fwd.save_invstd,
                    needs: GradNeeds::ALL,
                })
                .unwrap(),
            )
        })
    });
    let p = Pool2dParams {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
    };
    group.bench_function("max_pool2d 2x2", |bch| {
        bch.iter(|| black_box(kernels::max_pool2d(&x, &p).unwrap()))
    });
    let (y, idx) = kernels::max_pool2d(&x, &p).unwrap();
    let gy = kernels::copy_as(&y, MemoryKind::Gradient).unwrap();
    group.bench_function("max_pool2d_backward 2x2", |bch| {
        bch.iter(|| black_box(kernels::max_pool2d_backward(&gy, &idx, &DIMS).unwrap()))
    });
    group.bench_function("avg_pool2d 2x2", |bch| {
        bch.iter(|| black_box(kernels::avg_pool2d(&x, &p, true).unwrap()))
    });
    group.bench_function("avg_pool2d_backward 2x2", |bch| {
        bch.iter(|| black_box(kernels::avg_pool2d_backward(&gy, &DIMS, &p, true).unwrap()))
    });
    let rng = RngState { seed: 3, offset: 0 };
    group.bench_function("dropout p=0.5", |bch| {
        bch.iter(|| black_box(kernels::dropout(&x, 0.5, rng, x.elem_count()).unwrap()))
    });
    group.bench_function("sum_all", |bch| {
        bch.iter(|| black_box(kernels::sum_all(&x).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
