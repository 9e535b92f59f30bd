//! conv2d against the plain GEMMs of its matrix sizes, timed back to back in one run. Default
//! layer: the VGG-like x = [8, 128, 48, 48], 3x3, padding 1, 128 -> 256 (one GEMM per image,
//! M = 256, N = 2304, K = 1152); `--shape b,c,hw,co` picks another 3x3 padding-1 layer (images
//! under 1024 output pixels are compared with one GEMM over the whole batch). Each round times,
//! best of `--reps` (default 3) each: the forward GEMMs, conv2d forward, the weight-gradient and
//! input-gradient GEMMs, conv2d backward (input, weight and bias gradients); it prints GFLOP/s
//! and the ratios conv / GEMM, then the median ratios over `--rounds` (default 5) rounds.
//! Target on the default layer: ratios >= 0.60.
//!
//! `cargo bench -p memopt-core --bench conv_ratio -- --rounds 5 --reps 3 [--shape 320,128,6,128]`
//! (under `cargo test --benches` it runs one quick round).

mod common;

use common::{Layer, VGG};
use memopt_core::kernels::{Conv2dBackward, GradNeeds, conv2d, conv2d_backward};
use memopt_core::stats::median;
use std::hint::black_box;
use std::time::Instant;

/// Seconds of one call of `f`, best of `reps`.
fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |name: &str, default: usize| arg(&args, name).and_then(|v| v.parse().ok()).unwrap_or(default);
    // `cargo bench` passes --bench; without it (`cargo test --benches`) one quick round checks
    // that the bench runs.
    let bench = args.iter().any(|a| a == "--bench");
    let (rounds, reps) = if bench {
        (num("--rounds", 5), num("--reps", 3))
    } else {
        (num("--rounds", 1), num("--reps", 1))
    };
    let layer = match arg(&args, "--shape") {
        Some(s) => Layer::parse(s).expect("--shape takes b,c,hw,co"),
        None => VGG,
    };
    let t = layer.tensors();
    let [(_, mut fwd, count), (_, mut gw, _), (_, mut gx, _)] = layer.gemms();
    let ((m, n, k), _) = layer.gemm_sizes();
    let gflops = |flops: u64, s: f64| flops as f64 / s / 1e9;
    println!(
        "conv2d {layer} vs {count} GEMM(s) M={m} N={n} K={k}; {} rayon threads; CPU path {} \
         (MEMOPT_CPU_ISA caps it; the GEMMs run the gemm crate's own choice)",
        rayon::current_num_threads(),
        memopt_core::CpuIsa::selected()
    );
    let (mut ratios_fwd, mut ratios_bwd) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let t_gemm_fwd = best_of(reps, || (0..count).for_each(|_| fwd.run()));
        let t_conv_fwd = best_of(reps, || {
            black_box(conv2d(&t.x, &t.w, Some(&t.b), &t.p, 1).unwrap());
        });
        let t_gemm_gw = best_of(reps, || (0..count).for_each(|_| gw.run()));
        let t_gemm_gx = best_of(reps, || (0..count).for_each(|_| gx.run()));
        let t_conv_bwd = best_of(reps, || {
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
            );
        });
        let gemm_fwd = gflops(layer.forward_flops(), t_gemm_fwd);
        let conv_fwd = gflops(layer.forward_flops(), t_conv_fwd);
        let gemm_bwd = gflops(layer.backward_flops(), t_gemm_gw + t_gemm_gx);
        let conv_bwd = gflops(layer.backward_flops(), t_conv_bwd);
        println!(
            "round {round}: forward GEMM {gemm_fwd:5.1} conv {conv_fwd:5.1} GFLOP/s \
             ({:.1} ms) ratio {:.2} | backward GEMM {gemm_bwd:5.1} (grad_w {:.1}, grad_x {:.1}) \
             conv {conv_bwd:5.1} GFLOP/s ({:.1} ms) ratio {:.2}",
            t_conv_fwd * 1e3,
            conv_fwd / gemm_fwd,
            gflops(layer.forward_flops(), t_gemm_gw),
            gflops(layer.forward_flops(), t_gemm_gx),
            t_conv_bwd * 1e3,
            conv_bwd / gemm_bwd,
        );
        ratios_fwd.push(conv_fwd / gemm_fwd);
        ratios_bwd.push(conv_bwd / gemm_bwd);
    }
    println!(
        "median ratio conv/GEMM over {rounds} rounds: forward {:.2}, backward {:.2} \
         (target >= 0.60 on the default layer)",
        median(&ratios_fwd),
        median(&ratios_bwd)
    );
}
