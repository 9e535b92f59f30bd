//! Binary compressors reject non-binary input (naming the first offending element) unless the
//! spike flag vouches for it; wrong dtypes and mismatched packed data are clear errors.

mod common;

use common::{bits, tensor};
use memopt_compress::{CompressError, CompressorKind};
use memopt_core::{DType, Device, MemoryKind, MemoryTracker, Tensor};
use proptest::prelude::*;

const BINARY: [CompressorKind; 3] = [
    CompressorKind::BitSpike,
    CompressorKind::U8,
    CompressorKind::Sparse,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any value other than 0 and 1 is rejected with its index and value, whatever its place
    /// (including in the serial tail and in the parallel chunks), and nothing stays allocated.
    #[test]
    fn non_binary_input_is_rejected_at_the_first_offender(
        len in 1usize..200,
        at in any::<prop::sample::Index>(),
        later in any::<prop::sample::Index>(),
        bad in prop_oneof![Just(0.5f32), Just(2.0), Just(-1.0), Just(f32::INFINITY), Just(0.25)],
    ) {
        let at = at.index(len);
        let later = at.max(later.index(len));
        let mut v: Vec<f32> = (0..len).map(|i| (i % 3 == 1) as u32 as f32).collect();
        v[at] = bad;
        if later != at {
            v[later] = 3.0;
        }
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let x = tensor(&v, &[len], dtype, Device::Cpu);
            for kind in BINARY {
                let tracker = MemoryTracker::new(Device::Cpu);
                let _g = MemoryTracker::install(tracker.clone());
                let e = kind.build().compress(&x).unwrap_err();
                match &e {
                    CompressError::NonBinary { index, value, compressor } => {
                        prop_assert_eq!(*index, at as u64);
                        prop_assert_eq!(*value, bad as f64);
                        prop_assert_eq!(*compressor, kind.name());
                    }
                    other => prop_assert!(false, "{other}"),
                }
                let msg = e.to_string();
                prop_assert!(msg.contains(&format!("element {at}")) && msg.contains(kind.name()), "{}", msg);
                prop_assert_eq!(tracker.current_bytes(), 0);
            }
        }
    }
}

#[test]
fn nan_and_large_tensors_are_rejected_too() {
    let mut v = vec![0.0f32; (1 << 20) + 5];
    v[(1 << 19) + 3] = f32::NAN;
    v[(1 << 20) + 1] = 0.5;
    let x = tensor(&v, &[v.len()], DType::F32, Device::Cpu);
    for kind in BINARY {
        match kind.build().compress(&x).unwrap_err() {
            CompressError::NonBinary { index, value, .. } => {
                assert_eq!(index, (1 << 19) + 3);
                assert!(value.is_nan());
            }
            e => panic!("{e}"),
        }
    }
}

/// With the spike flag the check is skipped (the flag is the caller's promise): -0.0 and 0 pack
/// as 0, anything else as 1. Without it, -0.0 is accepted as zero and comes back as +0.0.
#[test]
fn spike_flag_is_trusted() {
    let v = [0.5f32, 0.0, -0.0, 2.0, 1.0];
    let x = tensor(&v, &[5], DType::F32, Device::Cpu).with_spike_flag(true);
    for kind in BINARY {
        let y = kind.build().compress(&x).unwrap().decompress().unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![1.0, 0.0, 0.0, 1.0, 1.0],
            "{kind}"
        );
        assert!(y.is_spike());
    }
    let z = tensor(&[-0.0, 1.0], &[2], DType::F32, Device::Cpu);
    for kind in BINARY {
        let y = kind.build().compress(&z).unwrap().decompress().unwrap();
        assert_eq!(bits(&y), vec![0, 1.0f32.to_bits()], "{kind}");
        assert!(!y.is_spike());
    }
}

#[test]
fn wrong_dtypes_name_the_accepted_ones() {
    let x = Tensor::from_vec(vec![0u8, 1], [2], Device::Cpu, MemoryKind::Activation).unwrap();
    for kind in CompressorKind::ALL {
        let r = kind.build().compress(&x);
        if kind == CompressorKind::Null {
            // Null keeps any tensor as it is.
            assert!(r.unwrap().payload().same_view(&x));
            continue;
        }
        let e = r.unwrap_err();
        assert!(
            matches!(e, CompressError::WrongDType { got: DType::U8, .. }),
            "{e}"
        );
        let accepted = match kind {
            CompressorKind::SpikeCounts => "accepted dtypes: f32",
            _ => "f32, f16, bf16",
        };
        assert!(e.to_string().contains(accepted), "{e}");
    }
}

#[test]
fn packed_data_goes_back_to_its_own_compressor_only() {
    let x = tensor(&[1.0, 0.0], &[2], DType::F32, Device::Cpu);
    let p = CompressorKind::BitSpike.build().compress(&x).unwrap();
    let e = CompressorKind::U8.build().decompress(&p).unwrap_err();
    assert_eq!(
        e,
        CompressError::Mismatch {
            packed: CompressorKind::BitSpike,
            compressor: CompressorKind::U8
        }
    );
    assert!(
        e.to_string().contains("bit_spike") && e.to_string().contains("u8"),
        "{e}"
    );
    for kind in CompressorKind::ALL {
        if kind != CompressorKind::BitSpike {
            assert!(kind.build().decompress(&p).is_err(), "{kind}");
        }
    }
}

/// Without a GPU, CUDA tensors cannot even be made: the error comes from memopt-core and says
/// why.
#[test]
fn cuda_errors_are_clear() {
    if let Err(e) = Tensor::zeros([4], DType::F32, Device::Cuda(0), MemoryKind::Activation) {
        let msg = e.to_string();
        assert!(msg.to_lowercase().contains("cuda"), "{msg}");
    }
}

/// On a GPU, sparse and half reject CUDA tensors with a hint.
#[test]
fn gpu_sparse_and_half_reject_cuda_tensors_with_a_hint() {
    if !memopt_core::cuda::gpu_or_skip("gpu_sparse_and_half_reject_cuda_tensors_with_a_hint") {
        return;
    }
    let x = Tensor::zeros([4], DType::F32, Device::Cuda(0), MemoryKind::Activation).unwrap();
    for kind in [CompressorKind::Sparse, CompressorKind::F16, CompressorKind::BF16] {
        let e = kind.build().compress(&x).unwrap_err();
        assert!(matches!(e, CompressError::UnsupportedDevice { .. }), "{e}");
        assert!(e.to_string().contains("cpu"), "{e}");
    }
}

#[test]
fn kinds_parse_print_and_serialize_by_name() {
    for kind in CompressorKind::ALL {
        assert_eq!(kind.name().parse::<CompressorKind>().unwrap(), kind);
        assert_eq!(
            serde_json::to_string(&kind).unwrap(),
            format!("\"{}\"", kind.name())
        );
        assert_eq!(
            serde_json::from_str::<CompressorKind>(&format!("\"{kind}\"")).unwrap(),
            kind
        );
        assert_eq!(kind.build().kind(), kind);
        assert_eq!(
            kind.is_lossless(),
            !matches!(kind, CompressorKind::F16 | CompressorKind::BF16)
        );
        assert_eq!(kind.requires_binary(), BINARY.contains(&kind));
    }
    let e = "bitspike".parse::<CompressorKind>().unwrap_err();
    assert!(
        e.contains("null, bit_spike, u8, sparse, spike_counts, f16, bf16"),
        "{e}"
    );
}
