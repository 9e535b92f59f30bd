//! Criterion benches of the GEMMs behind conv2d and of conv2d itself, on the VGG-like layer
//! x = [8, 128, 48, 48], 3x3, padding 1, 128 -> 256, and on a small-image layer
//! x = [320, 128, 6, 6] (late VGG blocks, T x N folded into the batch), where conv2d batches
//! images into one GEMM. Throughput is in elements = floating-point operations, so criterion's
//! Gelem/s reads as GFLOP/s. `benches/conv_ratio.rs` prints the ratio conv / GEMM measured
//! back to back.
//!
//! `cargo bench -p memopt-core --bench gemm_conv -- --warm-up-time 1 --measurement-time 3`

mod common;

use common::{Layer, VGG};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memopt_core::kernels::{Conv2dBackward, GradNeeds, conv2d, conv2d_backward, matmul};
use std::hint::black_box;

/// Late-block layer: 6x6 images, 320 of them.
const SMALL: Layer = Layer {
    b: 320,
    c: 128,
    hw: 6,
    co: 128,
};

fn gemm(c: &mut Criterion) {
    for (label, layer) in [("vgg", VGG), ("small", SMALL)] {
        let mut group = c.benchmark_group(format!("gemm_{label}"));
        group.sample_size(10);
        for (name, mut g, _) in layer.gemms() {
            group.throughput(Throughput::Elements(g.flops()));
            group.bench_function(name, |bench| bench.iter(|| g.run()));
        }
        group.finish();
    }
    // The public matmul on the VGG forward sizes (allocates and zeroes its tracked output).
    let ((m, n, k), _) = VGG.gemm_sizes();
    let mut rng = memopt_core::Philox::new(3);
    let (a, b) = (common::rand(&[m, k], &mut rng), common::rand(&[k, n], &mut rng));
    let mut group = c.benchmark_group("matmul");
    group.sample_size(10);
    group.throughput(Throughput::Elements(common::flops(m, n, k)));
    group.bench_function(format!("[{m},{k}] x [{k},{n}]"), |bench| {
        bench.iter(|| black_box(matmul(&a, &b).unwrap()))
    });
    group.finish();
}

fn conv(c: &mut Criterion) {
    for (label, layer) in [("vgg", VGG), ("small", SMALL)] {
        let t = layer.tensors();
        let mut group = c.benchmark_group(format!("conv2d_{label}_{}", memopt_core::CpuIsa::selected()));
        group.sample_size(10);
        group.throughput(Throughput::Elements(layer.forward_flops()));
        group.bench_function(format!("forward {layer}"), |bench| {
            bench.iter(|| black_box(conv2d(&t.x, &t.w, Some(&t.b), &t.p, 1).unwrap()))
        });
        group.throughput(Throughput::Elements(layer.backward_flops()));
        group.bench_function(format!("backward {layer}"), |bench| {
            bench.iter(|| {
                black_box(
                    conv2d_backward(Conv2dBackward {
                        grad: &t.grad,
                        x: &t.x,
                        w: &t.w,
                        has_bias: true,
                        params: &t.p,
                        needs: GradNeeds::ALL,
                        acc: None,
                    })
                    .unwrap(),
                )
            })
        });
        group.finish();
    }
}

criterion_group!(benches, gemm, conv);
criterion_main!(benches);
