//! Values written into existing tensors from the host (`Tensor::copy_from_host`: weights loaded
//! in place) on the CPU and Meta, and page-locked memory asked of a machine without a GPU: a
//! clear error, never a panic.

use memopt_core::storage::PinnedBuffer;
use memopt_core::{CoreError, DType, Device, MemoryKind, MemoryTracker, Target, Tensor};

#[test]
fn copy_from_host_writes_in_place_and_allocates_nothing() {
    for device in [Device::Cpu, Device::Meta(Target::Cpu), Device::Meta(Target::Cuda)] {
        let tracker = MemoryTracker::new(device);
        let _installed = MemoryTracker::install(tracker.clone());
        let t = Tensor::zeros([2, 3], DType::F32, device, MemoryKind::Parameter).unwrap();
        let held = (
            tracker.current_bytes(),
            tracker.allocated_bytes(),
            tracker.reserved_bytes(),
        );
        t.copy_from_host(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(
            (
                tracker.current_bytes(),
                tracker.allocated_bytes(),
                tracker.reserved_bytes()
            ),
            held,
            "{device}"
        );
        if device == Device::Cpu {
            assert_eq!(t.to_vec_f32().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
            // A view is written, not its whole storage.
            let row = t.narrow0(1, 1).unwrap();
            row.copy_from_host(&[7.0f32, 8.0, 9.0]).unwrap();
            assert_eq!(t.to_vec_f32().unwrap(), [1.0, 2.0, 3.0, 7.0, 8.0, 9.0]);
        }
        let e = t.copy_from_host(&[1.0f32; 5]).unwrap_err();
        assert!(e.to_string().contains("6 values for shape"), "{e}");
        let e = t.copy_from_host(&[1i64; 6]).unwrap_err();
        assert!(matches!(e, CoreError::DTypeMismatch { .. }), "{e}");
    }
}

#[test]
fn page_locked_memory_without_a_gpu_is_a_clear_error() {
    if matches!(memopt_core::cuda_device_count(), Ok(n) if n > 0) {
        eprintln!("skipped: this machine has a GPU (gpu_pool.rs covers page-locked uploads there)");
        return;
    }
    let e = PinnedBuffer::<f32>::new(0, 16).unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::CudaUnavailable { .. } | CoreError::CudaDeviceNotFound { .. }
        ),
        "{e}"
    );
    let e = PinnedBuffer::<f32>::new(0, usize::MAX).unwrap_err();
    assert!(e.to_string().contains("exceed the address space"), "{e}");
    let e = PinnedBuffer::<f32>::new(0, 0).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}
