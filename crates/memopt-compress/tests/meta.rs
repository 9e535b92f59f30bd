//! On the Meta device every compressor allocates and frees exactly what it does on the CPU
//! (identical tracker event streams: action, bytes, kind), except Sparse, whose payload on Meta
//! is its all-ones worst case, as its `packed_size` says.

mod common;

use common::{binary_case, record, tensor};
use memopt_compress::{CompressorKind, PackedSize};
use memopt_core::{DType, Device, MemoryKind};
use proptest::prelude::*;

fn run(
    kind: CompressorKind,
    values: &[f32],
    shape: &[usize],
    dtype: DType,
    spike: bool,
    device: Device,
) -> Vec<common::Ev> {
    let x = tensor(values, shape, dtype, device).with_spike_flag(spike);
    let c = kind.build();
    let ((), events) = record(device, || {
        let p = c.compress(&x).unwrap();
        assert_eq!(p.device(), device);
        let y = c.decompress(&p).unwrap();
        assert_eq!(
            (y.dims(), y.dtype(), y.device(), y.is_spike()),
            (shape, dtype, device, spike)
        );
        drop(p);
        drop(y);
    });
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn meta_records_what_the_cpu_records((shape, dtype, values) in binary_case(), spike in any::<bool>()) {
        for kind in common::binary_data_kinds() {
            let cpu = run(kind, &values, &shape, dtype, spike, Device::Cpu);
            let meta = run(kind, &values, &shape, dtype, spike, Device::META);
            if kind != CompressorKind::Sparse {
                prop_assert_eq!(&meta, &cpu, "{}", kind);
                continue;
            }
            // Sparse: same events, except that the payload is the worst case on Meta.
            let PackedSize::DataDependent { worst_case } =
                kind.build().packed_size(&shape.as_slice().into(), dtype) else { unreachable!() };
            prop_assert_eq!(meta.len(), cpu.len());
            for (m, c) in meta.iter().zip(&cpu) {
                prop_assert_eq!((m.0, m.2), (c.0, c.2));
                if m.2 == MemoryKind::Packed {
                    prop_assert_eq!(m.1, worst_case);
                    prop_assert!(c.1 <= worst_case);
                } else {
                    prop_assert_eq!(m.1, c.1);
                }
            }
        }
    }
}

/// The stream of a checked BitSpike compression: payload, 8-byte status word (freed at once),
/// then the decompressed output; with the spike flag no status word is needed.
#[test]
fn bitspike_event_stream_is_as_documented() {
    use memopt_core::memory::MemoryAction::{Alloc, Free};
    let v = vec![1.0f32; 20];
    for device in [Device::Cpu, Device::META] {
        assert_eq!(
            run(CompressorKind::BitSpike, &v, &[4, 5], DType::F32, false, device),
            vec![
                (Alloc, 3, MemoryKind::Packed),
                (Alloc, 8, MemoryKind::Workspace),
                (Free, 8, MemoryKind::Workspace),
                (Alloc, 80, MemoryKind::Activation),
                (Free, 3, MemoryKind::Packed),
                (Free, 80, MemoryKind::Activation),
            ]
        );
        assert_eq!(
            run(CompressorKind::BitSpike, &v, &[4, 5], DType::BF16, true, device),
            vec![
                (Alloc, 3, MemoryKind::Packed),
                (Alloc, 40, MemoryKind::Activation),
                (Free, 3, MemoryKind::Packed),
                (Free, 40, MemoryKind::Activation),
            ]
        );
    }
}
