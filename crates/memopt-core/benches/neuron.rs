//! Multi-step neuron kernels against a memcpy of the same bytes.
//!
//! LIF (tau 2, SpikingJelly defaults, Sigmoid surrogate) on `[T = 8, 2^19]` f32: forward
//! (saving `h_seq`), backward, both, the same with ATan, and PLIF forward+backward, reported as
//! GB/s of bytes touched (each f32 read or written once: forward reads x and writes spikes,
//! h_seq, v_final; backward reads grad_spikes and h_seq and writes grad_x). The memcpy copies
//! half those bytes, so it touches as many, in parallel on the same rayon pool, into a
//! preallocated buffer. With `--bench`, 25 interleaved pairs (kernel, then memcpy) then print the
//! ratio memcpy / kernel twice: of the best times, and the median of the per-pair ratios (each
//! pair runs back to back, so a machine shared with other work slows both alike). The kernels'
//! outputs come from the tracker's caching allocator as recycled blocks (`Init::Overwritten`, no
//! zero-fill), so after the first iteration no output costs page faults.
//!
//! On glibc the bench first asks malloc to keep freed memory, so that the inputs and the memcpy
//! buffers of the bench itself stay in place.
//!
//! `cargo bench -p memopt-core --bench neuron -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, Throughput};
use memopt_core::kernels::{NeuronBackward, NeuronConfig, Surrogate, neuron_backward, neuron_forward};
use memopt_core::{Device, MemoryKind, Tensor};
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;

const STEPS: usize = 8;
const NEURONS: usize = 1 << 19;
const COPY_CHUNK: usize = 1 << 16;

struct Inputs {
    x: Tensor,
    grad_spikes: Tensor,
    w: Tensor,
}

fn inputs() -> Inputs {
    let len = STEPS * NEURONS;
    // Deterministic inputs in [-0.5, 2): LIF(tau 2) fires on about a third of the steps.
    let x: Vec<f32> = (0..len)
        .map(|i| ((i * 7919 % 1000) as f32) / 400.0 - 0.5)
        .collect();
    let g: Vec<f32> = (0..len)
        .map(|i| ((i * 104_729 % 1000) as f32) / 500.0 - 1.0)
        .collect();
    let t = |v: Vec<f32>| Tensor::from_vec(v, [STEPS, NEURONS], Device::Cpu, MemoryKind::Input).unwrap();
    Inputs {
        x: t(x),
        grad_spikes: t(g),
        w: Tensor::from_vec(vec![0.0f32], [1], Device::Cpu, MemoryKind::Parameter).unwrap(),
    }
}

/// Bytes touched by forward: x, spikes, h_seq, v_final.
fn forward_bytes() -> u64 {
    4 * (3 * STEPS * NEURONS + NEURONS) as u64
}

/// Bytes touched by backward: grad_spikes, h_seq, grad_x.
fn backward_bytes() -> u64 {
    4 * (3 * STEPS * NEURONS) as u64
}

fn forward_backward(cfg: &NeuronConfig, inp: &Inputs, w: Option<&Tensor>) {
    let out = neuron_forward(cfg, &inp.x, None, w, true).unwrap();
    let h = out.h_seq.as_ref().unwrap();
    black_box(
        neuron_backward(NeuronBackward {
            cfg,
            grad_spikes: (&inp.grad_spikes).into(),
            grad_v_final: None,
            h_seq: h,
            v_init: None,
            w,
            want_v_init_grad: false,
            w_acc: None,
        })
        .unwrap(),
    );
    black_box(out);
}

fn par_copy(dst: &mut [f32], src: &[f32]) {
    dst.par_chunks_mut(COPY_CHUNK)
        .zip(src.par_chunks(COPY_CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

fn bench(c: &mut Criterion) {
    let inp = inputs();
    let lif = NeuronConfig::lif(2.0);
    let lif_atan = NeuronConfig {
        surrogate: Surrogate::ATan { alpha: 2.0 },
        ..lif
    };
    let plif = NeuronConfig::plif();
    let h = neuron_forward(&lif, &inp.x, None, None, true)
        .unwrap()
        .h_seq
        .unwrap();
    let total = forward_bytes() + backward_bytes();
    let src = vec![1.0f32; (total / 8) as usize];
    let mut dst = vec![0.0f32; src.len()];

    let mut g = c.benchmark_group(format!("neuron_T8x2^19_{}", memopt_core::CpuIsa::selected()));
    g.sample_size(20);
    g.throughput(Throughput::BytesDecimal(forward_bytes()));
    g.bench_function("lif_forward", |b| {
        b.iter(|| black_box(neuron_forward(&lif, &inp.x, None, None, true).unwrap()))
    });
    g.throughput(Throughput::BytesDecimal(backward_bytes()));
    g.bench_function("lif_backward", |b| {
        b.iter(|| {
            black_box(
                neuron_backward(NeuronBackward {
                    cfg: &lif,
                    grad_spikes: (&inp.grad_spikes).into(),
                    grad_v_final: None,
                    h_seq: &h,
                    v_init: None,
                    w: None,
                    want_v_init_grad: false,
                    w_acc: None,
                })
                .unwrap(),
            )
        })
    });
    g.throughput(Throughput::BytesDecimal(total));
    g.bench_function("lif_forward_backward", |b| {
        b.iter(|| forward_backward(&lif, &inp, None))
    });
    g.bench_function("lif_atan_forward_backward", |b| {
        b.iter(|| forward_backward(&lif_atan, &inp, None))
    });
    g.bench_function("plif_forward_backward", |b| {
        b.iter(|| forward_backward(&plif, &inp, Some(&inp.w)))
    });
    g.bench_function("memcpy_same_bytes", |b| {
        b.iter(|| par_copy(black_box(&mut dst), &src))
    });
    g.finish();
}

fn secs(f: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Times (s) of `a` and `b` over 25 interleaved pairs, `a` then `b` in each.
fn interleaved(mut a: impl FnMut(), mut b: impl FnMut()) -> Vec<(f64, f64)> {
    (0..25).map(|_| (secs(&mut a), secs(&mut b))).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Interleaved timings of forward+backward and the memcpy in one run, with ratios.
fn ratio_report() {
    let inp = inputs();
    let total = forward_bytes() + backward_bytes();
    let src = vec![1.0f32; (total / 8) as usize];
    let mut dst = vec![0.0f32; src.len()];
    let gbs = |s: f64| total as f64 / s / 1e9;
    println!(
        "[T={STEPS}, {NEURONS}] f32, {:.1} MB touched, {} rayon threads, 25 interleaved pairs",
        total as f64 / 1e6,
        rayon::current_num_threads(),
    );
    let lif = NeuronConfig::lif(2.0);
    let atan = NeuronConfig {
        surrogate: Surrogate::ATan { alpha: 2.0 },
        ..lif
    };
    let plif = NeuronConfig::plif();
    for (name, cfg, w) in [
        ("LIF Sigmoid", lif, None),
        ("LIF ATan", atan, None),
        ("PLIF Sigmoid", plif, Some(&inp.w)),
    ] {
        let pairs = interleaved(
            || forward_backward(&cfg, &inp, w),
            || par_copy(black_box(&mut dst), &src),
        );
        let best = |f: fn(&(f64, f64)) -> f64| pairs.iter().map(f).fold(f64::INFINITY, f64::min);
        let (kernel, copy) = (best(|p| p.0), best(|p| p.1));
        let ratio = median(pairs.iter().map(|p| p.1 / p.0).collect());
        println!(
            "{name} forward+backward: best {:.2} ms = {:.1} GB/s; memcpy best {:.2} ms = {:.1} GB/s; \
             bandwidth ratio kernel/memcpy: of the bests {:.2}, median of the pairs {ratio:.2}",
            kernel * 1e3,
            gbs(kernel),
            copy * 1e3,
            gbs(copy),
            copy / kernel,
        );
    }
}

/// Makes glibc keep freed memory in the heap (no trimming; mmap only above 32 MiB), so that
/// repeated 16 MB outputs reuse memory instead of faulting in fresh pages each time.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only changes allocator tuning parameters; called before other threads
    // allocate.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, i32::MAX);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

fn main() {
    keep_freed_memory();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    if std::env::args().any(|a| a == "--bench") {
        ratio_report();
    }
}
