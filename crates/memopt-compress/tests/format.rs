//! Bit-exact payload formats against hand-computed bytes and numpy's
//! `packbits(x.ravel(), bitorder='little')`.

mod common;

use common::tensor;
use memopt_compress::{CompressorKind, PackedSize};
use memopt_core::{DType, Device, Shape};

fn payload(kind: CompressorKind, values: &[f32], shape: &[usize], dtype: DType) -> Vec<u8> {
    let x = tensor(values, shape, dtype, Device::Cpu);
    kind.build()
        .compress(&x)
        .unwrap()
        .payload()
        .to_vec::<u8>()
        .unwrap()
}

/// Value 8j+i is bit i (LSB first) of byte j; the last byte is zero-padded.
#[test]
fn bitspike_bytes_by_hand() {
    let v = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // bits 0,2,3,7 -> 0b1000_1101 = 0x8D; value 8 -> bit 0 of byte 1.
        assert_eq!(
            payload(CompressorKind::BitSpike, &v, &[3, 3], dtype),
            vec![0x8D, 0x01]
        );
    }
    // Row-major flattening: [[0,1],[1,0]] has ones at 1 and 2 -> 0b0110.
    assert_eq!(
        payload(
            CompressorKind::BitSpike,
            &[0.0, 1.0, 1.0, 0.0],
            &[2, 2],
            DType::F32
        ),
        vec![0b0110]
    );
    // A 0-D tensor is one value; an empty one packs to nothing.
    assert_eq!(
        payload(CompressorKind::BitSpike, &[1.0], &[], DType::F32),
        vec![1]
    );
    assert_eq!(
        payload(CompressorKind::BitSpike, &[], &[3, 0, 2], DType::F32),
        Vec::<u8>::new()
    );
    // All ones over 16 values: two full bytes.
    assert_eq!(
        payload(CompressorKind::BitSpike, &[1.0; 16], &[16], DType::F32),
        vec![0xFF, 0xFF]
    );
}

/// 210 values of shape [2, 3, 5, 7] (value i is 1 when ((i * 2654435761 mod 2^32) >> 7) mod 3
/// == 0); the expected bytes were produced by numpy 2 with
/// `np.packbits(x.ravel().astype(np.uint8), bitorder='little')`.
#[test]
fn bitspike_matches_numpy_packbits_little() {
    const NUMPY: [u8; 27] = [
        147, 36, 73, 146, 32, 73, 146, 36, 73, 146, 38, 73, 210, 36, 65, 154, 36, 72, 146, 4, 77, 146, 160,
        73, 130, 52, 1,
    ];
    let v: Vec<f32> = (0..210u64)
        .map(|i| (((i * 2654435761) % (1 << 32)) >> 7) % 3 == 0)
        .map(|b| b as u32 as f32)
        .collect();
    assert_eq!(v.iter().sum::<f32>(), 71.0);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        assert_eq!(payload(CompressorKind::BitSpike, &v, &[2, 3, 5, 7], dtype), NUMPY);
    }
}

#[test]
fn u8_bytes_by_hand() {
    assert_eq!(
        payload(CompressorKind::U8, &[0.0, 1.0, 1.0, 0.0, 1.0], &[5], DType::BF16),
        vec![0, 1, 1, 0, 1]
    );
}

/// Sparse: u16 little-endian indices up to 65,536 elements, u32 above.
#[test]
fn sparse_indices_by_hand() {
    let mut v = vec![0.0f32; 300];
    v[1] = 1.0;
    v[258] = 1.0; // 0x0102 -> bytes 02 01
    assert_eq!(
        payload(CompressorKind::Sparse, &v, &[3, 100], DType::F16),
        vec![1, 0, 0x02, 0x01]
    );
    let n = (1 << 16) + 1;
    let mut v = vec![0.0f32; n];
    v[7] = 1.0;
    v[n - 1] = 1.0;
    let x = tensor(&v, &[n], DType::F32, Device::Cpu);
    let p = CompressorKind::Sparse.build().compress(&x).unwrap();
    assert_eq!(p.payload().dtype(), DType::U32);
    assert_eq!(p.payload().to_vec::<u32>().unwrap(), vec![7, 1 << 16]);
    // At exactly 65,536 elements the largest index (65,535) still fits u16.
    let mut v = vec![0.0f32; 1 << 16];
    v[65535] = 1.0;
    assert_eq!(
        payload(CompressorKind::Sparse, &v, &[1 << 16], DType::F32),
        vec![0xFF, 0xFF]
    );
}

/// Half payloads are the rounded values (f16 1.0 = 0x3C00, bf16 1.0 = 0x3F80; 1/3 rounds to
/// nearest even).
#[test]
fn half_payload_bits() {
    let x = tensor(&[1.0, 1.0 / 3.0], &[2], DType::F32, Device::Cpu);
    let p = CompressorKind::F16.build().compress(&x).unwrap();
    let h: Vec<u16> = p
        .payload()
        .to_vec::<half::f16>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(h, vec![0x3C00, 0x3555]);
    let p = CompressorKind::BF16.build().compress(&x).unwrap();
    let h: Vec<u16> = p
        .payload()
        .to_vec::<half::bf16>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(h, vec![0x3F80, 0x3EAB]);
}

/// packed_size from the shape alone, for every kind.
#[test]
fn packed_sizes_from_shapes() {
    let s = Shape::new([3, 5, 7]); // 105 elements
    let size = |k: CompressorKind, d| k.build().packed_size(&s, d);
    assert_eq!(size(CompressorKind::BitSpike, DType::F32), PackedSize::Exact(14));
    assert_eq!(size(CompressorKind::U8, DType::F16), PackedSize::Exact(105));
    assert_eq!(size(CompressorKind::Null, DType::F32), PackedSize::Exact(420));
    assert_eq!(size(CompressorKind::Null, DType::BF16), PackedSize::Exact(210));
    assert_eq!(size(CompressorKind::F16, DType::F32), PackedSize::Exact(210));
    assert_eq!(size(CompressorKind::BF16, DType::F32), PackedSize::Exact(210));
    assert_eq!(
        size(CompressorKind::Sparse, DType::F32),
        PackedSize::DataDependent { worst_case: 210 }
    );
    let big = Shape::new([1 << 17]);
    assert_eq!(
        CompressorKind::Sparse.build().packed_size(&big, DType::F32),
        PackedSize::DataDependent { worst_case: 4 << 17 }
    );
    assert_eq!(
        CompressorKind::BitSpike
            .build()
            .packed_size(&Shape::scalar(), DType::F32),
        PackedSize::Exact(1)
    );
    assert_eq!(PackedSize::DataDependent { worst_case: 9 }.upper_bound(), 9);
    assert!(!PackedSize::DataDependent { worst_case: 9 }.is_exact());
}
