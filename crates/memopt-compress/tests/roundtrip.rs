//! Round trips of every compressor on random shapes (0-D to 5-D, empty, odd lengths) and
//! dtypes (f32, f16, bf16) against naive references, with `packed_size` equal to the tracked
//! payload bytes.

mod common;

use common::{binary_case, bits, float_dtypes, record, shapes, tensor};
use half::{bf16, f16};
use memopt_compress::{CompressorKind, PackedSize, sparse_index_bytes};
use memopt_core::memory::MemoryAction;
use memopt_core::{DType, Device, MemoryKind, MemoryTracker};
use proptest::prelude::*;

/// The payload a naive reference expects: numpy packbits(little), bytes, or sorted indices.
fn expected_payload(kind: CompressorKind, values: &[f32]) -> Option<Vec<u8>> {
    match kind {
        CompressorKind::BitSpike => {
            let mut out = vec![0u8; values.len().div_ceil(8)];
            for (i, &v) in values.iter().enumerate() {
                if v == 1.0 {
                    out[i / 8] |= 1 << (i % 8);
                }
            }
            Some(out)
        }
        CompressorKind::U8 => Some(values.iter().map(|&v| (v == 1.0) as u8).collect()),
        CompressorKind::Sparse if values.len() <= 1 << 16 => Some(
            (0..values.len())
                .filter(|&i| values[i] == 1.0)
                .flat_map(|i| (i as u16).to_le_bytes())
                .collect(),
        ),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every compressor restores binary data bit for bit, with shape, dtype, device and spike
    /// flag; the payload matches the naive reference and its tracked bytes equal packed_size.
    #[test]
    fn binary_round_trips((shape, dtype, values) in binary_case(), spike in any::<bool>()) {
        for kind in common::binary_data_kinds() {
            let c = kind.build();
            let (r, events) = record(Device::Cpu, || {
                let x = tensor(&values, &shape, dtype, Device::Cpu).with_spike_flag(spike);
                let tracker = MemoryTracker::current(Device::Cpu);
                let before = tracker.stats().kind(MemoryKind::Packed).current;
                let p = c.compress(&x).unwrap();
                prop_assert_eq!(p.kind(), kind);
                prop_assert_eq!(p.shape().dims(), &shape[..]);
                prop_assert_eq!(p.dtype(), dtype);
                prop_assert_eq!(p.device(), Device::Cpu);
                prop_assert_eq!(p.is_spike(), spike);
                let packed_now = tracker.stats().kind(MemoryKind::Packed).current - before;
                match c.packed_size(x.shape(), dtype) {
                    PackedSize::Exact(b) => prop_assert_eq!(b, p.payload_bytes()),
                    PackedSize::DataDependent { worst_case } => {
                        let ones = values.iter().filter(|&&v| v == 1.0).count() as u64;
                        let w = sparse_index_bytes(values.len() as u64);
                        prop_assert_eq!(p.payload_bytes(), ones * w);
                        prop_assert_eq!(worst_case, values.len() as u64 * w);
                    }
                }
                if kind == CompressorKind::Null {
                    prop_assert!(p.payload().same_view(&x), "null must not copy");
                    prop_assert_eq!(packed_now, 0);
                } else {
                    prop_assert_eq!(packed_now, p.payload_bytes());
                }
                if let Some(want) = expected_payload(kind, &values) {
                    prop_assert_eq!(p.payload().to_vec::<u8>().unwrap(), want);
                }
                if kind == CompressorKind::Sparse && values.len() > 1 << 16 {
                    let want: Vec<u32> = (0..values.len() as u32).filter(|&i| values[i as usize] == 1.0).collect();
                    prop_assert_eq!(p.payload().to_vec::<u32>().unwrap(), want);
                }
                let y = p.decompress().unwrap();
                prop_assert_eq!(y.dims(), &shape[..]);
                prop_assert_eq!(y.dtype(), dtype);
                prop_assert_eq!(y.device(), Device::Cpu);
                prop_assert_eq!(y.is_spike(), spike);
                prop_assert_eq!(bits(&y), bits(&x));
                if kind != CompressorKind::Null {
                    prop_assert_eq!(y.kind(), MemoryKind::Activation);
                }
                Ok(())
            });
            r?;
            // Every byte allocated is freed again, and nothing but payload, workspace and the
            // output was allocated.
            let net: i64 = events.iter().map(|e| match e.0 {
                MemoryAction::Alloc => e.1 as i64,
                MemoryAction::Free => -(e.1 as i64),
                MemoryAction::Retag { .. } => 0,
            }).sum();
            prop_assert_eq!(net, 0);
        }
    }

    /// The half compressors round each value to nearest even in f16 or bf16 and convert it back
    /// to the input dtype; values the half type holds survive exactly.
    #[test]
    fn half_rounds_like_the_reference(
        shape in shapes(),
        dtype in float_dtypes(),
        seed in any::<u64>(),
    ) {
        let n: usize = shape.iter().product();
        let mut s = seed | 1;
        let values: Vec<f32> = (0..n).map(|_| {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2000.0 - 1000.0) as f32
        }).collect();
        let x = tensor(&values, &shape, DType::F32, Device::Cpu).to_dtype(dtype).unwrap();
        let input = x.to_vec_f32().unwrap();
        for kind in [CompressorKind::F16, CompressorKind::BF16] {
            let p = kind.build().compress(&x).unwrap();
            prop_assert_eq!(p.payload().dtype(), if kind == CompressorKind::F16 { DType::F16 } else { DType::BF16 });
            prop_assert_eq!(p.payload_bytes(), 2 * n as u64);
            let y = p.decompress().unwrap();
            prop_assert_eq!(y.dtype(), dtype);
            prop_assert_eq!(y.dims(), &shape[..]);
            let got = y.to_vec_f32().unwrap();
            for (i, (&v, &g)) in input.iter().zip(&got).enumerate() {
                let rounded = match kind {
                    CompressorKind::F16 => f16::from_f32(v).to_f32(),
                    _ => bf16::from_f32(v).to_f32(),
                };
                let want = match dtype {
                    DType::F32 => rounded,
                    DType::F16 => f16::from_f32(rounded).to_f32(),
                    _ => bf16::from_f32(rounded).to_f32(),
                };
                prop_assert_eq!(g.to_bits(), want.to_bits(), "element {} of {}", i, n);
            }
            prop_assert!(!kind.is_lossless());
        }
    }
}

/// Long tensors take the parallel paths (and Sparse its u32 indices); they round-trip too.
#[test]
fn long_tensors_round_trip_through_parallel_kernels() {
    let n = (1 << 20) + 77;
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 2654435761usize) >> 9 & 7 == 0) as u32 as f32)
        .collect();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = tensor(&values, &[n], dtype, Device::Cpu);
        for kind in [
            CompressorKind::BitSpike,
            CompressorKind::U8,
            CompressorKind::Sparse,
        ] {
            for spike in [false, true] {
                let p = kind.build().compress(&x.with_spike_flag(spike)).unwrap();
                if let Some(want) = expected_payload(kind, &values) {
                    assert_eq!(p.payload().to_vec::<u8>().unwrap(), want, "{kind} {dtype}");
                }
                if kind == CompressorKind::Sparse {
                    let want: Vec<u32> = (0..n as u32).filter(|&i| values[i as usize] == 1.0).collect();
                    assert_eq!(p.payload().to_vec::<u32>().unwrap(), want);
                }
                assert_eq!(bits(&p.decompress().unwrap()), bits(&x), "{kind} {dtype}");
            }
        }
    }
}

/// Views (a time slice of a larger tensor) compress their own elements only.
#[test]
fn views_compress_their_own_elements() {
    let values: Vec<f32> = (0..60).map(|i| (i % 3 == 0) as u32 as f32).collect();
    let x = tensor(&values, &[6, 10], DType::F32, Device::Cpu);
    let v = x.narrow0(2, 3).unwrap();
    for kind in common::binary_data_kinds() {
        let p = kind.build().compress(&v).unwrap();
        let y = p.decompress().unwrap();
        assert_eq!(y.dims(), &[3, 10]);
        assert_eq!(y.to_vec::<f32>().unwrap(), values[20..50].to_vec(), "{kind}");
    }
}
