//! BitSpike pack and unpack throughput against a memcpy of the same f32 bytes, 1..256 MiB of
//! f32 input, on the CPU (and the GPU when one is present). Every figure is "bytes of f32 input
//! (or output) per second", so ratio = memcpy time / kernel time.
//!
//! Run: `cargo bench -p memopt-compress --bench pack -- --warm-up-time 1 --measurement-time 3`
//!
//! Groups: `cpu_kernel/<MiB>` compares the slice kernels with `copy_from_slice` into
//! preallocated buffers; `cpu_api/<MiB>` compares `compress`/`decompress` (tracked allocation
//! included) with `to_vec` (a memcpy into a fresh allocation); `gpu/<MiB>` compares the CUDA
//! kernels with a device-to-device copy.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use memopt_compress::{BitSpike, Compressor, cpu};
use memopt_core::{Device, MemoryKind, Tensor, cuda_device_count};
use std::hint::black_box;
use std::time::Duration;

const SIZES_MIB: [usize; 3] = [1, 16, 256];

/// Deterministic spikes with about 20% ones.
fn spikes(n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if s.is_multiple_of(5) { 1.0 } else { 0.0 }
        })
        .collect()
}

fn cpu_kernels(c: &mut Criterion) {
    for mib in SIZES_MIB {
        let n = mib << 18; // f32 values in `mib` MiB
        let src = spikes(n);
        let mut copy = vec![0f32; n];
        let mut packed = vec![0u8; n.div_ceil(8)];
        cpu::pack_bits(&src, &mut packed, true).unwrap();
        let mut unpacked = vec![0f32; n];
        let mut g = c.benchmark_group(format!("cpu_kernel/{mib}MiB"));
        g.throughput(Throughput::Bytes(4 * n as u64));
        if mib >= 16 {
            g.sample_size(10);
        }
        g.bench_function(BenchmarkId::from_parameter("memcpy"), |b| {
            b.iter(|| copy.copy_from_slice(black_box(&src)))
        });
        g.bench_function(BenchmarkId::from_parameter("pack_checked"), |b| {
            b.iter(|| cpu::pack_bits(black_box(&src), &mut packed, true).unwrap())
        });
        g.bench_function(BenchmarkId::from_parameter("pack_trusted"), |b| {
            b.iter(|| cpu::pack_bits(black_box(&src), &mut packed, false).unwrap())
        });
        g.bench_function(BenchmarkId::from_parameter("unpack"), |b| {
            b.iter(|| cpu::unpack_bits(black_box(&packed), &mut unpacked).unwrap())
        });
        g.finish();
        assert_eq!(unpacked, src);
    }
}

fn cpu_api(c: &mut Criterion) {
    for mib in SIZES_MIB {
        let n = mib << 18;
        let data = spikes(n);
        let x = Tensor::from_vec(data.clone(), [n], Device::Cpu, MemoryKind::Activation).unwrap();
        let spike = x.with_spike_flag(true);
        let p = BitSpike.compress(&spike).unwrap();
        let mut g = c.benchmark_group(format!("cpu_api/{mib}MiB"));
        g.throughput(Throughput::Bytes(4 * n as u64));
        if mib >= 16 {
            g.sample_size(10);
        }
        g.bench_function(BenchmarkId::from_parameter("memcpy_to_vec"), |b| {
            b.iter(|| black_box(&data).to_vec())
        });
        g.bench_function(BenchmarkId::from_parameter("compress_checked"), |b| {
            b.iter(|| BitSpike.compress(black_box(&x)).unwrap())
        });
        g.bench_function(BenchmarkId::from_parameter("compress_spike_flag"), |b| {
            b.iter(|| BitSpike.compress(black_box(&spike)).unwrap())
        });
        g.bench_function(BenchmarkId::from_parameter("decompress"), |b| {
            b.iter(|| BitSpike.decompress(black_box(&p)).unwrap())
        });
        g.finish();
    }
}

fn gpu(c: &mut Criterion) {
    match cuda_device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => return eprintln!("gpu benches skipped: no CUDA device"),
        Err(e) => return eprintln!("gpu benches skipped: {e}"),
    }
    let stream = memopt_core::storage::cuda_context(0).unwrap().default_stream();
    for mib in SIZES_MIB {
        let n = mib << 18;
        let x = Tensor::from_vec(spikes(n), [n], Device::Cuda(0), MemoryKind::Activation).unwrap();
        let spike = x.with_spike_flag(true);
        let p = BitSpike.compress(&spike).unwrap();
        let src = stream.clone_htod(&spikes(n)).unwrap();
        let mut dst = stream.alloc_zeros::<f32>(n).unwrap();
        let mut g = c.benchmark_group(format!("gpu/{mib}MiB"));
        g.throughput(Throughput::Bytes(4 * n as u64));
        g.bench_function(BenchmarkId::from_parameter("memcpy_dtod"), |b| {
            b.iter(|| {
                stream.memcpy_dtod(&src, &mut dst).unwrap();
                stream.synchronize().unwrap();
            })
        });
        g.bench_function(BenchmarkId::from_parameter("compress_checked"), |b| {
            b.iter(|| {
                let r = BitSpike.compress(&x).unwrap();
                stream.synchronize().unwrap();
                r
            })
        });
        g.bench_function(BenchmarkId::from_parameter("compress_spike_flag"), |b| {
            b.iter(|| {
                let r = BitSpike.compress(&spike).unwrap();
                stream.synchronize().unwrap();
                r
            })
        });
        g.bench_function(BenchmarkId::from_parameter("decompress"), |b| {
            b.iter(|| {
                let r = BitSpike.decompress(&p).unwrap();
                stream.synchronize().unwrap();
                r
            })
        });
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = cpu_kernels, cpu_api, gpu
}
criterion_main!(benches);
