//! The CUDA tracker's caching allocator against Meta with the CUDA target, without a GPU: the
//! same random trace of tensor allocations and frees through a `cuda:0` tracker (device blocks
//! from a fake GPU, as `Storage` takes them) and a `meta:cuda` tracker gives identical
//! requested, allocated and reserved figures and peaks at every step, and live device blocks
//! never overlap, with fixed segments and with expandable ones (whose mapped pages are what the
//! fake driver holds). The rules are PyTorch's CUDA constants (512 B rounding, 1 MiB small-block
//! limit, 2 MiB small segments, 20 MiB large segments, own segments rounded to 2 MiB; with
//! expandable segments, 2 MiB and 20 MiB pages).

mod fake_gpu;

use fake_gpu::FakeGpu;
use memopt_core::memory::DeviceBlock;
use memopt_core::{AllocatorConfig, Device, MemoryKind, MemoryTracker, Target};

#[test]
fn cuda_pool_and_meta_cuda_agree_on_every_figure() {
    agree_on_every_figure(AllocatorConfig::FIXED);
}

#[test]
fn expandable_cuda_pool_and_meta_cuda_agree_on_every_figure() {
    agree_on_every_figure(AllocatorConfig::EXPANDABLE);
}

fn agree_on_every_figure(config: AllocatorConfig) {
    let (gpu, used) = FakeGpu::new(u64::MAX / 2);
    let cuda = MemoryTracker::with_backing_and_config(Device::Cuda(0), Box::new(gpu), config);
    let meta = MemoryTracker::with_config(Device::Meta(Target::Cuda), config);
    let mut live: Vec<(
        memopt_core::memory::Allocation,
        Option<DeviceBlock>,
        memopt_core::memory::Allocation,
    )> = Vec::new();
    let mut state = 0x2545f4914f6cdd1du64;
    for step in 0..3000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if live.len() < 48 && (!state.is_multiple_of(3) || live.is_empty()) {
            let bytes = match state % 5 {
                0 => 0,
                1 => state % 4096,
                2 => state % (1 << 20) + 1,
                3 => state % (12 << 20),
                _ => state % (40 << 20),
            };
            let kind = MemoryKind::ALL[(state >> 8) as usize % MemoryKind::ALL.len()];
            let (a, block) = cuda.allocate_device(bytes, kind).unwrap();
            let m = meta.allocate(bytes, kind).unwrap();
            assert_eq!(block.is_some(), bytes > 0);
            if let Some(b) = &block {
                assert!(b.bytes() >= bytes && b.bytes() % 512 == 0 && b.device_ptr() % 512 == 0);
                for (_, other, _) in &live {
                    if let Some(o) = other {
                        let disjoint = b.device_ptr() + b.bytes() <= o.device_ptr()
                            || o.device_ptr() + o.bytes() <= b.device_ptr();
                        assert!(disjoint, "step {step}: blocks overlap");
                    }
                }
            }
            live.push((a, block, m));
        } else {
            let i = (state as usize / 3) % live.len();
            drop(live.swap_remove(i));
        }
        if step % 700 == 0 {
            assert_eq!(cuda.empty_cache(), meta.empty_cache());
        }
        let (c, m) = (cuda.stats(), meta.stats());
        assert_eq!(
            (
                c.current,
                c.peak,
                c.allocated,
                c.allocated_peak,
                c.reserved,
                c.reserved_peak,
                c.segments
            ),
            (
                m.current,
                m.peak,
                m.allocated,
                m.allocated_peak,
                m.reserved,
                m.reserved_peak,
                m.segments
            ),
            "step {step}"
        );
        assert_eq!(
            *used.lock().unwrap(),
            c.reserved,
            "step {step}: driver bytes = reserved"
        );
    }
    live.clear();
    assert_eq!(cuda.empty_cache(), meta.empty_cache());
    assert_eq!((cuda.reserved_bytes(), *used.lock().unwrap()), (0, 0));
}
