//! The CUDA kernels against the CPU path, bit for bit. Without a CUDA device each test prints why
//! it skips and passes, unless MEMOPT_REQUIRE_GPU=1, which makes it fail naming itself.

mod common;

use common::{bits, record, tensor};
use memopt_compress::{CompressError, CompressorKind};
use memopt_core::cuda::gpu_or_skip;
use memopt_core::{DType, Device};

const GPU: Device = Device::Cuda(0);
const KINDS: [CompressorKind; 2] = [CompressorKind::BitSpike, CompressorKind::U8];
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Spikes with roughly one in `1 << k` ones, irregular.
fn spikes(n: usize, k: u32) -> Vec<f32> {
    (0..n as u64)
        .map(|i| ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % (1 << k) == 0) as u32 as f32)
        .collect()
}

const LENGTHS: [usize; 14] = [
    0,
    1,
    7,
    8,
    31,
    32,
    33,
    255,
    256,
    257,
    2047,
    2049,
    100_003,
    (1 << 20) + 3,
];

#[test]
fn gpu_payloads_and_outputs_match_the_cpu_bit_for_bit() {
    if !gpu_or_skip("gpu_payloads_and_outputs_match_the_cpu_bit_for_bit") {
        return;
    }
    for (j, &n) in LENGTHS.iter().enumerate() {
        let v = spikes(n, 1 + j as u32 % 4);
        for dtype in DTYPES {
            let cpu = tensor(&v, &[n], dtype, Device::Cpu);
            let gpu = tensor(&v, &[n], dtype, GPU);
            for kind in KINDS {
                for spike in [false, true] {
                    let c = kind.build();
                    let pc = c.compress(&cpu.with_spike_flag(spike)).unwrap();
                    let pg = c.compress(&gpu.with_spike_flag(spike)).unwrap();
                    assert_eq!(pg.device(), GPU);
                    assert_eq!(pg.payload_bytes(), pc.payload_bytes());
                    assert_eq!(
                        pg.payload().to_vec::<u8>().unwrap(),
                        pc.payload().to_vec::<u8>().unwrap(),
                        "{kind} {dtype} n={n}"
                    );
                    let y = c.decompress(&pg).unwrap();
                    assert_eq!(
                        (y.device(), y.dtype(), y.dims(), y.is_spike()),
                        (GPU, dtype, &[n][..], spike)
                    );
                    assert_eq!(bits(&y), bits(&cpu), "{kind} {dtype} n={n}");
                }
            }
        }
    }
}

#[test]
fn gpu_views_and_multi_dimensional_shapes() {
    if !gpu_or_skip("gpu_views_and_multi_dimensional_shapes") {
        return;
    }
    let v = spikes(7 * 3 * 5 * 11, 2);
    for dtype in DTYPES {
        let cpu = tensor(&v, &[7, 3, 5, 11], dtype, Device::Cpu)
            .narrow0(3, 3)
            .unwrap();
        let gpu = tensor(&v, &[7, 3, 5, 11], dtype, GPU).narrow0(3, 3).unwrap();
        for kind in KINDS {
            let c = kind.build();
            let (pc, pg) = (c.compress(&cpu).unwrap(), c.compress(&gpu).unwrap());
            assert_eq!(
                pg.payload().to_vec::<u8>().unwrap(),
                pc.payload().to_vec::<u8>().unwrap()
            );
            let y = c.decompress(&pg).unwrap();
            assert_eq!(y.dims(), &[3, 3, 5, 11]);
            assert_eq!(bits(&y), bits(&cpu), "{kind} {dtype}");
        }
    }
}

#[test]
fn gpu_rejects_non_binary_input_like_the_cpu() {
    if !gpu_or_skip("gpu_rejects_non_binary_input_like_the_cpu") {
        return;
    }
    for &n in &[1usize, 40, 5000, (1 << 20) + 3] {
        let mut v = spikes(n, 2);
        let at = n * 2 / 3;
        v[at] = 0.5;
        if at + 1 < n {
            v[n - 1] = 2.0;
        }
        for dtype in DTYPES {
            for kind in KINDS {
                let e = kind.build().compress(&tensor(&v, &[n], dtype, GPU)).unwrap_err();
                match e {
                    CompressError::NonBinary { index, value, .. } => {
                        assert_eq!((index, value), (at as u64, 0.5), "{kind} {dtype} n={n}")
                    }
                    e => panic!("{kind} {dtype}: {e}"),
                }
                // With the spike flag the GPU trusts it, exactly as the CPU does.
                let x = tensor(&v, &[n], dtype, GPU).with_spike_flag(true);
                let y = kind.build().compress(&x).unwrap().decompress().unwrap();
                let c = tensor(&v, &[n], dtype, Device::Cpu).with_spike_flag(true);
                let z = kind.build().compress(&c).unwrap().decompress().unwrap();
                assert_eq!(bits(&y), bits(&z));
            }
        }
    }
}

/// The GPU records the same tracker events as Meta (and so as the CPU): planning on Meta is
/// exact for the GPU too.
#[test]
fn gpu_records_what_meta_records() {
    if !gpu_or_skip("gpu_records_what_meta_records") {
        return;
    }
    let v = spikes(1000, 2);
    for dtype in DTYPES {
        for kind in KINDS {
            for spike in [false, true] {
                let events = |device: Device| {
                    let x = tensor(&v, &[10, 100], dtype, device).with_spike_flag(spike);
                    record(device, || {
                        let p = kind.build().compress(&x).unwrap();
                        let y = p.decompress().unwrap();
                        drop(p);
                        drop(y);
                    })
                    .1
                };
                assert_eq!(events(GPU), events(Device::META), "{kind} {dtype} spike={spike}");
            }
        }
    }
}

#[test]
fn gpu_kernels_are_loaded_once() {
    if !gpu_or_skip("gpu_kernels_are_loaded_once") {
        return;
    }
    let x = tensor(&spikes(100, 1), &[100], DType::F32, GPU);
    for kind in KINDS {
        kind.build().compress(&x).unwrap().decompress().unwrap();
    }
    let loaded = memopt_core::cuda::loaded_module_count();
    for _ in 0..3 {
        for kind in KINDS {
            kind.build().compress(&x).unwrap().decompress().unwrap();
        }
    }
    assert_eq!(memopt_core::cuda::loaded_module_count(), loaded);
}

/// Packed spikes on a GPU: a time slice unpacked from byte-aligned and unaligned bits
/// (bitspike_unpack_f32 and bitspike_unpack_span_f32) equal the CPU bit for bit; conv2d and
/// linear reading them one time step at a time equal the CPU's within the GEMM tolerance of the
/// other GPU tests (bit for bit where every sum is exact).
#[test]
fn gpu_packed_spikes_and_stepwise_layers_match_the_cpu() {
    if !gpu_or_skip("gpu_packed_spikes_and_stepwise_layers_match_the_cpu") {
        return;
    }
    use memopt_compress::PackedSpikes;
    use memopt_core::kernels::{self, Conv2dParams};
    // 3 steps of [3, 2, 5, 5] (150 values: the steps start inside a byte) and of [2, 2, 4, 4]
    // (64 values: on a byte).
    for (n, hw) in [(3usize, 5usize), (2, 4)] {
        let (t, c) = (3, 2);
        let v = spikes(t * n * c * hw * hw, 1);
        let run = |device: Device| {
            let outputs = record(device, || {
                let x = tensor(&v, &[t * n, c, hw, hw], DType::F32, device).with_spike_flag(true);
                let p = PackedSpikes::pack(&x).unwrap();
                let slice = p.narrow0(n, n).unwrap().unpack().unwrap();
                let w = kernels::scale(
                    &tensor(&spikes(4 * c * 9, 2), &[4, c, 3, 3], DType::F32, device),
                    0.3,
                )
                .unwrap();
                let params = Conv2dParams {
                    padding: [1, 1],
                    ..Conv2dParams::default()
                };
                let y = kernels::conv2d_stepwise(&p, &w, None, &params, t).unwrap();
                let wacc = kernels::scale(&w, 0.0).unwrap();
                let gx = kernels::conv2d_backward_stepwise(kernels::Conv2dBackwardStepwise {
                    grad: &y,
                    x: &p,
                    w: &w,
                    params: &params,
                    input: true,
                    acc: kernels::WeightGradAcc {
                        weight: Some(&wacc),
                        bias: None,
                        time_steps: t,
                    },
                })
                .unwrap()
                .unwrap();
                let flat = p.reshape([t, n, c * hw * hw]).unwrap();
                let wl = tensor(&spikes(3 * c * hw * hw, 3), &[3, c * hw * hw], DType::F32, device);
                let yl = kernels::linear_stepwise(&flat, &wl, None, t).unwrap();
                [slice, y, gx, wacc, yl]
            })
            .0;
            outputs.map(|r| r.to_device(Device::Cpu).unwrap().to_vec_f32().unwrap())
        };
        let (gpu, cpu) = (run(GPU), run(Device::Cpu));
        // The unpacked slice and the linear layer (0/1 weights: integer sums, exact in any
        // order) bit for bit; the convolution's output, input gradient and weight gradient (0.3
        // weights: cuBLAS sums in another order) within 1e-5 of the output's magnitude.
        let names = [
            "slice",
            "conv2d",
            "conv2d input gradient",
            "conv2d weight gradient",
            "linear",
        ];
        for (i, name) in names.iter().enumerate() {
            let (g, c) = (&gpu[i], &cpu[i]);
            assert_eq!(g.len(), c.len(), "n={n} hw={hw} {name}: lengths");
            let exact = matches!(*name, "slice" | "linear");
            let tol = if exact {
                0.0
            } else {
                1e-5 * c.iter().fold(1f32, |m, v| m.max(v.abs()))
            };
            if let Some(k) = (0..c.len()).find(|&k| {
                if exact {
                    g[k].to_bits() != c[k].to_bits()
                } else {
                    (g[k] - c[k]).abs() > tol
                }
            }) {
                panic!(
                    "n={n} hw={hw} {name}[{k}]: gpu {} cpu {} ({})",
                    g[k],
                    c[k],
                    if exact {
                        "bit-identical expected"
                    } else {
                        "beyond 1e-5 of the magnitude"
                    }
                );
            }
        }
    }
}
