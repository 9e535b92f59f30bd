//! Spike counts: pooled spikes (average pooling of f32 spikes without padding) kept as one
//! count per byte, restored bit for bit, with the same allocations on Meta as on the CPU; and
//! the CUDA kernels against the CPU (skipped without a GPU, failing under MEMOPT_REQUIRE_GPU=1).

mod common;

use common::{bits, record};
use memopt_compress::{CompressError, CompressorKind};
use memopt_core::cuda::gpu_or_skip;
use memopt_core::kernels::{Pool2dParams, avg_pool2d};
use memopt_core::memory::MemoryAction;
use memopt_core::{DType, Device, KnownValues, MemoryKind, Tensor};
use proptest::prelude::*;

/// Spikes `[b, c, h, w]` with about one in `1 << k` ones, from `seed`.
fn spikes(dims: [usize; 4], seed: u64, k: u32, device: Device) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| ((i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40).is_multiple_of(1 << k))
        .map(|one| one as u32 as f32)
        .collect();
    Tensor::from_vec(v, dims, device, MemoryKind::Activation)
        .unwrap()
        .with_spike_flag(true)
}

fn pool(kernel: [usize; 2], stride: [usize; 2]) -> Pool2dParams {
    Pool2dParams {
        kernel,
        stride,
        padding: [0, 0],
    }
}

/// The naive reference: each output's window sum over spikes, as a count.
fn reference_counts(x: &[f32], [b, c, h, w]: [usize; 4], p: &Pool2dParams) -> Vec<u8> {
    let (oh, ow) = (
        (h - p.kernel[0]) / p.stride[0] + 1,
        (w - p.kernel[1]) / p.stride[1] + 1,
    );
    let mut out = Vec::new();
    for plane in 0..b * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut n = 0u8;
                for dy in 0..p.kernel[0] {
                    for dx in 0..p.kernel[1] {
                        let (y, xx) = (oy * p.stride[0] + dy, ox * p.stride[1] + dx);
                        n += x[plane * h * w + y * w + xx] as u8;
                    }
                }
                out.push(n);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Average pooling of spikes is known to be pooled spikes; spike counts keep it as the
    /// window counts (the naive reference), one byte per value, and restore every bit.
    #[test]
    fn pooled_spikes_round_trip_bit_for_bit(
        b in 1usize..3, c in 1usize..4, h in 2usize..13, w in 2usize..13,
        kh in 1usize..5, kw in 1usize..5, sh in 1usize..4, sw in 1usize..4,
        seed in any::<u64>(), k in 0u32..4,
    ) {
        prop_assume!(kh <= h && kw <= w);
        let p = pool([kh, kw], [sh, sw]);
        let x = spikes([b, c, h, w], seed, k, Device::Cpu);
        let y = avg_pool2d(&x, &p, true).unwrap();
        prop_assert_eq!(y.known_values(), KnownValues::PooledSpikes { window: (kh * kw) as u16 });
        let c = CompressorKind::SpikeCounts.build();
        let packed = c.compress(&y).unwrap();
        prop_assert_eq!(packed.payload_bytes(), y.elem_count() as u64);
        prop_assert_eq!(
            packed.payload().to_vec::<u8>().unwrap(),
            reference_counts(&x.to_vec::<f32>().unwrap(), [b, x.dims()[1], h, w], &p)
        );
        let back = c.decompress(&packed).unwrap();
        prop_assert_eq!(back.known_values(), y.known_values());
        prop_assert_eq!(back.dims(), y.dims());
        prop_assert_eq!(bits(&back), bits(&y));
    }
}

/// Above the size where the CPU kernels split the work over threads (2^19 values), the same:
/// the counts of the naive reference and every bit back.
#[test]
fn large_pooled_tensors_round_trip_on_every_thread_count() {
    let dims = [4, 64, 96, 96];
    let p = pool([2, 2], [2, 2]);
    let x = spikes(dims, 5, 1, Device::Cpu);
    let y = avg_pool2d(&x, &p, true).unwrap();
    assert!(y.elem_count() > 1 << 19);
    let c = CompressorKind::SpikeCounts.build();
    let packed = c.compress(&y).unwrap();
    assert_eq!(
        packed.payload().to_vec::<u8>().unwrap(),
        reference_counts(&x.to_vec::<f32>().unwrap(), dims, &p)
    );
    assert_eq!(bits(&c.decompress(&packed).unwrap()), bits(&y));
}

#[test]
fn meta_records_what_the_cpu_records() {
    let p = pool([2, 2], [2, 2]);
    let run = |device: Device| {
        let x = spikes([2, 3, 8, 6], 7, 1, device);
        let y = avg_pool2d(&x, &p, true).unwrap();
        let ((), events) = record(device, || {
            let c = CompressorKind::SpikeCounts.build();
            let packed = c.compress(&y).unwrap();
            let back = c.decompress(&packed).unwrap();
            assert_eq!(back.known_values(), KnownValues::PooledSpikes { window: 4 });
        });
        events
    };
    let cpu = run(Device::Cpu);
    assert!(
        cpu.iter()
            .any(|e| e == &(MemoryAction::Alloc, 72, MemoryKind::Packed)),
        "{cpu:?}"
    );
    assert_eq!(run(Device::META), cpu);
}

#[test]
fn only_pooled_spikes_are_taken() {
    let c = CompressorKind::SpikeCounts.build();
    let x = spikes([1, 1, 4, 4], 3, 1, Device::Cpu);
    for (t, known) in [
        (x.clone(), "it is spikes"),
        (x.with_spike_flag(false), "nothing is known"),
    ] {
        let e = c.compress(&t).unwrap_err();
        assert!(matches!(e, CompressError::NotPooledSpikes { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(known) && msg.contains("bit_spike or u8"), "{msg}");
    }
    // Padding makes border divisors differ: not pooled spikes.
    let padded = Pool2dParams {
        padding: [1, 1],
        ..pool([2, 2], [2, 2])
    };
    assert_eq!(
        avg_pool2d(&x, &padded, true).unwrap().known_values(),
        KnownValues::Any
    );
    // Nor is the pooling of data not known to be spikes, or clearing the flag.
    let y = avg_pool2d(&x.with_spike_flag(false), &pool([2, 2], [2, 2]), true).unwrap();
    assert_eq!(y.known_values(), KnownValues::Any);
    let z = avg_pool2d(&x, &pool([2, 2], [2, 2]), true).unwrap();
    assert_eq!(z.with_spike_flag(false).known_values(), KnownValues::Any);
    // Views keep what is known.
    assert_eq!(z.reshape([4]).unwrap().known_values(), z.known_values());
    let half = z.to_dtype(DType::F16).unwrap();
    let e = c.compress(&half).unwrap_err().to_string();
    assert!(e.contains("accepted dtypes: f32"), "{e}");
}

#[test]
fn gpu_spike_counts_match_the_cpu_bit_for_bit() {
    if !gpu_or_skip("gpu_spike_counts_match_the_cpu_bit_for_bit") {
        return;
    }
    let gpu = Device::Cuda(0);
    for (dims, kernel, stride) in [
        ([2, 3, 8, 8], [2, 2], [2, 2]),
        ([1, 5, 9, 7], [3, 3], [2, 1]),
        ([4, 64, 48, 48], [2, 2], [2, 2]),
        ([1, 1, 16, 16], [15, 17 - 2], [1, 1]),
    ] {
        let p = pool(kernel, stride);
        let c = CompressorKind::SpikeCounts.build();
        let yc = avg_pool2d(&spikes(dims, 11, 1, Device::Cpu), &p, true).unwrap();
        let yg = avg_pool2d(&spikes(dims, 11, 1, gpu), &p, true).unwrap();
        assert_eq!(yg.known_values(), yc.known_values());
        let (pc, pg) = (c.compress(&yc).unwrap(), c.compress(&yg).unwrap());
        assert_eq!(pg.device(), gpu);
        assert_eq!(
            pg.payload().to_vec::<u8>().unwrap(),
            pc.payload().to_vec::<u8>().unwrap(),
            "{dims:?} {kernel:?}"
        );
        let back = c.decompress(&pg).unwrap();
        assert_eq!(bits(&back), bits(&yc), "{dims:?} {kernel:?}");
    }
}
