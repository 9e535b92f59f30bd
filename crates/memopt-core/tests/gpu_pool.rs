//! GPU memory through the caching allocator, on a GPU (skipped with the reason elsewhere; a
//! failure under MEMOPT_REQUIRE_GPU=1): tensors are blocks of `cuMemAlloc` segments, the
//! driver's used memory grows by exactly the segments reserved, zero-filled buffers are zero
//! even in recycled blocks, moves and copies keep values, a request larger than the GPU is a
//! typed out-of-memory error that leaves the tracker as it was, and a sequence of allocations
//! gives the same figures on the GPU as on Meta with the CUDA target. With expandable segments
//! a pool grows in place by 20 MiB pages (`cuMemMap`), the driver's used memory grows by exactly
//! the pages mapped, and `empty_cache` gives them back.

mod gpu_common;

use gpu_common::{GPU, gpu_or_skip, values};
use memopt_core::cuda::device_memory;
use memopt_core::storage::StorageData;
use memopt_core::{AllocatorConfig, CoreError, DType, Device, MemoryKind, MemoryTracker, Target, Tensor};

const MIB: u64 = 1 << 20;

/// Whether `t`'s GPU memory lies inside one of the pool's segments: its address is a
/// 512-byte multiple (every block is), and the pool reserves at least its bytes.
fn in_pool(t: &Tensor, tracker: &MemoryTracker) -> bool {
    match &*t.storage().read() {
        StorageData::Cuda(d) => d.device_ptr() % 512 == 0 && tracker.reserved_bytes() >= d.bytes(),
        _ => false,
    }
}

#[test]
fn gpu_tensors_are_blocks_of_cuda_segments() {
    if !gpu_or_skip("gpu_tensors_are_blocks_of_cuda_segments") {
        return;
    }
    let tracker = MemoryTracker::with_config(GPU, AllocatorConfig::FIXED);
    let _installed = MemoryTracker::install(tracker.clone());
    // Warm up the context (and whatever the driver loads on a first memset) before measuring.
    drop(Tensor::zeros([16], DType::F32, GPU, MemoryKind::Workspace).unwrap());
    assert_eq!(tracker.empty_cache(), 2 * MIB);
    let before = device_memory(0).unwrap();

    // 3 MiB of f32: a 20 MiB large segment; 100 B: a 2 MiB small one.
    let data = values(3 << 18, 7, 4.0);
    let a = Tensor::from_vec(data.clone(), [3 << 18], GPU, MemoryKind::Activation).unwrap();
    let b = Tensor::zeros([25], DType::F32, GPU, MemoryKind::Activation).unwrap();
    assert!(in_pool(&a, &tracker) && in_pool(&b, &tracker));
    assert_eq!(tracker.reserved_bytes(), 22 * MIB);
    let after = device_memory(0).unwrap();
    assert_eq!(
        after.used_bytes() - before.used_bytes(),
        22 * MIB,
        "the driver's used memory grows by the segments reserved ({before:?} -> {after:?})"
    );
    assert_eq!(a.to_vec::<f32>().unwrap(), data);
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![0.0; 25]);

    // A recycled block: zeros are zero, a copy on the GPU keeps the values.
    drop(a);
    let z = Tensor::zeros([3 << 18], DType::F32, GPU, MemoryKind::Activation).unwrap();
    assert!(z.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    assert_eq!(tracker.reserved_bytes(), 22 * MIB);
    let x = Tensor::from_vec(data.clone(), [3 << 18], GPU, MemoryKind::Activation).unwrap();
    let copy = x.deep_copy(MemoryKind::Activation).unwrap();
    assert_eq!(copy.to_vec::<f32>().unwrap(), data);
    drop((x, copy, z, b));
    assert_eq!(tracker.empty_cache(), tracker.stats().reserved_peak);
    let emptied = device_memory(0).unwrap();
    assert_eq!(
        emptied.used_bytes(),
        before.used_bytes(),
        "empty_cache gives every segment back"
    );
}

#[test]
fn an_expandable_pool_maps_pages_in_place_and_the_driver_holds_exactly_them() {
    if !gpu_or_skip("an_expandable_pool_maps_pages_in_place_and_the_driver_holds_exactly_them") {
        return;
    }
    let tracker = MemoryTracker::with_config(GPU, AllocatorConfig::EXPANDABLE);
    let _installed = MemoryTracker::install(tracker.clone());
    drop(Tensor::zeros([16], DType::F32, GPU, MemoryKind::Workspace).unwrap());
    assert_eq!(tracker.empty_cache(), 2 * MIB);
    let before = device_memory(0).unwrap();
    let used = || device_memory(0).unwrap().used_bytes() - before.used_bytes();

    // 3 MiB: one 20 MiB page of the large pool's range
    let data = values(3 << 18, 11, 4.0);
    let a = Tensor::from_vec(data.clone(), [3 << 18], GPU, MemoryKind::Activation).unwrap();
    assert!(in_pool(&a, &tracker));
    assert_eq!(
        (tracker.reserved_bytes(), tracker.stats().segments),
        (20 * MIB, 1)
    );
    assert_eq!(used(), 20 * MIB, "the driver holds the pages mapped");
    // 30 MiB more: the range grows in place by one page, still one segment, and a's values are
    // untouched by the mapping
    let b = Tensor::zeros([30 << 18], DType::F32, GPU, MemoryKind::Activation).unwrap();
    assert!(in_pool(&b, &tracker));
    assert_eq!(
        (tracker.reserved_bytes(), tracker.stats().segments),
        (40 * MIB, 1)
    );
    assert_eq!(used(), 40 * MIB);
    assert_eq!(a.to_vec::<f32>().unwrap(), data);
    assert!(b.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    // freeing b leaves its whole free pages to unmap; a's page stays
    drop(b);
    assert_eq!(tracker.empty_cache(), 20 * MIB);
    assert_eq!(used(), 20 * MIB);
    assert_eq!(a.to_vec::<f32>().unwrap(), data);
    // b's old free head and a freshly mapped page: zeros either way (filled, or fresh)
    let c = Tensor::zeros([30 << 18], DType::F32, GPU, MemoryKind::Activation).unwrap();
    assert!(c.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    drop((a, c));
    assert_eq!(tracker.empty_cache(), 40 * MIB);
    assert_eq!(used(), 0, "empty_cache gives every page and the range back");
}

#[test]
fn a_request_larger_than_the_gpu_is_a_typed_error_that_changes_nothing() {
    if !gpu_or_skip("a_request_larger_than_the_gpu_is_a_typed_error_that_changes_nothing") {
        return;
    }
    let tracker = MemoryTracker::new(GPU);
    let _installed = MemoryTracker::install(tracker.clone());
    let held = Tensor::zeros([1000], DType::F32, GPU, MemoryKind::Parameter).unwrap();
    let total = device_memory(0).unwrap().total_bytes;
    let before = tracker.stats();
    let elements = (total / 4 + 1) as usize;
    let e = Tensor::zeros([elements], DType::F32, GPU, MemoryKind::Activation).unwrap_err();
    match &e {
        CoreError::CudaOutOfMemory {
            device,
            bytes,
            held,
            reserved,
            ..
        } => {
            assert_eq!(*device, GPU);
            assert_eq!(*bytes, elements as u64 * 4);
            assert_eq!((*held, *reserved), (before.current, before.reserved));
        }
        other => panic!("expected CudaOutOfMemory, got {other}"),
    }
    assert_eq!(tracker.stats(), before, "a refused allocation records nothing");
    assert_eq!(held.to_vec::<f32>().unwrap().len(), 1000);
}

#[test]
fn gpu_and_meta_cuda_trackers_agree_on_an_allocation_sequence() {
    if !gpu_or_skip("gpu_and_meta_cuda_trackers_agree_on_an_allocation_sequence") {
        return;
    }
    let figures = |device: Device, config: AllocatorConfig| {
        let tracker = MemoryTracker::with_config(device, config);
        let _installed = MemoryTracker::install(tracker.clone());
        let mut live = Vec::new();
        for (i, n) in [1usize, 300, 70_000, 3 << 18, 5 << 20, 17, 1 << 20, 9 << 18]
            .into_iter()
            .enumerate()
        {
            live.push(Tensor::zeros([n], DType::F32, device, MemoryKind::Activation).unwrap());
            if i % 3 == 2 {
                live.remove(0);
            }
        }
        let s = tracker.stats();
        drop(live);
        (
            s.peak,
            s.allocated_peak,
            s.reserved_peak,
            s.segments,
            tracker.empty_cache(),
        )
    };
    for config in [AllocatorConfig::FIXED, AllocatorConfig::EXPANDABLE] {
        assert_eq!(
            figures(GPU, config),
            figures(Device::Meta(Target::Cuda), config),
            "{config:?}"
        );
    }
}

/// Batches uploaded from page-locked memory on the copy stream arrive whole, in the pool (the
/// tracker counts them from the upload's start, as Meta does), and ordered before the compute
/// stream's next kernel; a page-locked buffer rewritten for the next batch waits for its last
/// upload, so the first tensor keeps its values; a pending upload dropped unread leaves its block
/// safe to reuse; values written in place with `copy_from_host` allocate nothing on the GPU.
#[test]
fn pinned_uploads_overlap_and_arrive_whole() {
    if !gpu_or_skip("pinned_uploads_overlap_and_arrive_whole") {
        return;
    }
    use memopt_core::storage::PinnedBuffer;
    let tracker = MemoryTracker::new(GPU);
    let _installed = MemoryTracker::install(tracker.clone());
    let meta = MemoryTracker::new(Device::Meta(Target::Cuda));
    let n = 3 << 20; // 12 MiB of f32: a large block
    let first = values(n, 1, 4.0);
    let second = values(n, 2, 4.0);
    let mut pinned = PinnedBuffer::<f32>::new(0, n).unwrap();
    pinned.host_mut().unwrap().copy_from_slice(&first);
    let a = Tensor::upload_pinned(&mut pinned, [n], MemoryKind::Input).unwrap();
    {
        let _m = MemoryTracker::install(meta.clone());
        drop(Tensor::zeros([n], DType::F32, Device::Meta(Target::Cuda), MemoryKind::Input).unwrap());
    }
    assert_eq!(tracker.peak_bytes(), meta.peak_bytes());
    assert_eq!(tracker.reserved_bytes(), meta.reserved_bytes());
    // Rewriting waits for the first upload to have read the buffer.
    pinned.host_mut().unwrap().copy_from_slice(&second);
    let b = Tensor::upload_pinned(&mut pinned, [n], MemoryKind::Input).unwrap();
    let (a, b) = (a.ready().unwrap(), b.ready().unwrap());
    // A kernel right after `ready` reads the uploaded values.
    let doubled = memopt_core::kernels::add(&a, &a).unwrap();
    assert_eq!(a.to_vec_f32().unwrap(), first);
    assert_eq!(b.to_vec_f32().unwrap(), second);
    let want: Vec<f32> = first.iter().map(|v| v + v).collect();
    assert_eq!(doubled.to_vec_f32().unwrap(), want);
    // A smaller upload uses the buffer's front.
    let c = Tensor::upload_pinned(&mut pinned, [2, 5], MemoryKind::Input).unwrap();
    assert_eq!(c.dims(), &[2, 5]);
    assert_eq!(c.ready().unwrap().to_vec_f32().unwrap(), second[..10]);
    // Dropped unread: the block goes back, and the next tensor in it is zero-filled after the copy.
    let unread = Tensor::upload_pinned(&mut pinned, [n], MemoryKind::Input).unwrap();
    drop(unread);
    let zeros = Tensor::zeros([n], DType::F32, GPU, MemoryKind::Workspace).unwrap();
    assert!(zeros.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
    // In place: no GPU allocation.
    let held = tracker.current_bytes();
    a.copy_from_host(&second).unwrap();
    assert_eq!(tracker.current_bytes(), held);
    assert_eq!(a.to_vec_f32().unwrap(), second);
    // More values than the buffer holds are refused, not copied.
    let e = Tensor::upload_pinned(&mut pinned, [n + 1], MemoryKind::Input).unwrap_err();
    assert!(e.to_string().contains("asked of a buffer"), "{e}");
}
