//! The per-device memory tracker.

use super::block::{BlockLease, DeviceBlock, HostBlock};
use super::caching::{AllocatorConfig, BlockId, CachingAllocator, Grant, NoBacking, SegmentBacking};
use super::{
    Allocation, AllocationId, KindStats, MemoryAction, MemoryEvent, MemoryKind, MemoryStats, current_scope,
};
use crate::storage::{CudaBacking, HostBacking};
use crate::{CoreError, Device, Result, Target};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// Receives every event of the trackers it is subscribed to. Called on the thread that caused
/// the event, after the tracker's own figures are updated.
pub trait MemorySubscriber: Send + Sync {
    /// Called once per allocation, free and re-tag.
    fn on_event(&self, event: &MemoryEvent);
}

#[derive(Debug)]
struct TrackerState {
    next_id: u64,
    seq: u64,
    current: u64,
    peak: u64,
    allocated: u64,
    allocated_peak: u64,
    reserved_peak: u64,
    by_kind: [KindStats; MemoryKind::COUNT],
    live: u64,
    allocator: CachingAllocator,
}

impl TrackerState {
    fn add(&mut self, kind: MemoryKind, requested: u64, allocated: u64) {
        self.current += requested;
        self.peak = self.peak.max(self.current);
        self.allocated += allocated;
        self.allocated_peak = self.allocated_peak.max(self.allocated);
        self.reserved_peak = self.reserved_peak.max(self.allocator.reserved());
        let k = &mut self.by_kind[kind.index()];
        k.current += requested;
        k.peak = k.peak.max(k.current);
        k.allocated += allocated;
        k.allocated_peak = k.allocated_peak.max(k.allocated);
    }

    fn remove(&mut self, kind: MemoryKind, requested: u64, allocated: u64) {
        self.current -= requested;
        self.allocated -= allocated;
        let k = &mut self.by_kind[kind.index()];
        k.current -= requested;
        k.allocated -= allocated;
    }
}

type SubscriberList = Arc<[(u64, Arc<dyn MemorySubscriber>)]>;

/// Records every allocation and free on one device, with exact current and peak bytes, overall
/// and per [`MemoryKind`], and forwards each event to its subscribers.
///
/// Trackers are per thread: [`MemoryTracker::current`] returns this thread's tracker for a device,
/// so concurrent tests or planners never see each other's bytes. A buffer remembers the tracker
/// that allocated it, so its free is recorded there whichever thread drops it.
pub struct MemoryTracker {
    device: Device,
    /// Whether the caching allocator is bypassed: requested bytes only ([`Self::counting`]).
    counting: bool,
    created: Instant,
    state: Mutex<TrackerState>,
    subscribers: RwLock<SubscriberList>,
    next_subscription: Mutex<u64>,
}

impl std::fmt::Debug for MemoryTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTracker")
            .field("device", &self.device)
            .field("stats", &self.stats())
            .finish()
    }
}

impl MemoryTracker {
    /// A fresh tracker with no history, its caching allocator configured by
    /// [`AllocatorConfig::current`]. Install it with [`MemoryTracker::install`] to make
    /// allocations on this thread go through it. Its caching allocator is backed by host
    /// memory on the CPU, by GPU memory (`cuMemAlloc` segments, or ranges mapped with
    /// `cuMemMap`) on a CUDA device, and by nothing on Meta, which replays the same arithmetic.
    pub fn new(device: Device) -> Arc<Self> {
        Self::with_config(device, AllocatorConfig::current())
    }

    /// Like [`MemoryTracker::new`], with the caching allocator configured by `config`.
    pub fn with_config(device: Device, config: AllocatorConfig) -> Arc<Self> {
        let backing: Box<dyn SegmentBacking> = match device {
            Device::Cpu => Box::new(HostBacking),
            Device::Cuda(ordinal) => Box::new(CudaBacking::new(ordinal)),
            Device::Meta(_) => Box::new(NoBacking),
        };
        Self::with_backing_and_config(device, backing, config)
    }

    /// A fresh tracker on Meta of `target` that counts requested bytes only: no caching
    /// allocator stands behind it, so each buffer's allocated bytes are its requested bytes and
    /// nothing is reserved. Its requested figures (current, peak, per kind) are those of a
    /// [`MemoryTracker::new`] tracker for the same allocations, which never depend on the
    /// allocator; it is for measurements that read only those, at less bookkeeping per
    /// allocation (the planner measures thousands of segments on Meta). Meta only: a CPU or GPU
    /// buffer needs its memory from the allocator.
    pub fn counting(target: Target) -> Arc<Self> {
        let device = Device::Meta(target);
        let mut tracker =
            Self::with_backing_and_config(device, Box::new(NoBacking), AllocatorConfig::current());
        if let Some(t) = Arc::get_mut(&mut tracker) {
            t.counting = true;
        }
        tracker
    }

    /// Whether this tracker counts requested bytes only ([`MemoryTracker::counting`]).
    pub fn is_counting(&self) -> bool {
        self.counting
    }

    /// A fresh tracker for `device` whose caching allocator takes fixed segments from
    /// `backing` (tests use a backing with a fixed capacity to exercise out-of-memory paths).
    pub fn with_backing(device: Device, backing: Box<dyn SegmentBacking>) -> Arc<Self> {
        Self::with_backing_and_config(device, backing, AllocatorConfig::FIXED)
    }

    /// A fresh tracker for `device` whose caching allocator, configured by `config`, takes its
    /// memory from `backing`.
    pub fn with_backing_and_config(
        device: Device,
        backing: Box<dyn SegmentBacking>,
        config: AllocatorConfig,
    ) -> Arc<Self> {
        Arc::new(MemoryTracker {
            device,
            counting: false,
            created: Instant::now(),
            state: Mutex::new(TrackerState {
                next_id: 0,
                seq: 0,
                current: 0,
                peak: 0,
                allocated: 0,
                allocated_peak: 0,
                reserved_peak: 0,
                by_kind: [KindStats::default(); MemoryKind::COUNT],
                live: 0,
                allocator: CachingAllocator::with_config(device, backing, config),
            }),
            subscribers: RwLock::new(Arc::from(Vec::new())),
            next_subscription: Mutex::new(0),
        })
    }

    /// Device tracked.
    pub fn device(&self) -> Device {
        self.device
    }

    /// How this tracker's caching allocator gets its memory.
    pub fn allocator_config(&self) -> AllocatorConfig {
        self.lock().allocator.config()
    }

    fn lock(&self) -> MutexGuard<'_, TrackerState> {
        // A poisoned lock only means a subscriber panicked; the figures are still consistent
        // because they are updated before subscribers run.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new buffer of `bytes` bytes, with its caching-allocator block, and returns the
    /// guard that records its free and gives the block back. An error when the device's
    /// backing cannot provide a segment.
    pub fn allocate(self: &Arc<Self>, bytes: u64, kind: MemoryKind) -> Result<Allocation> {
        let (id, grant, event) = self.record_alloc(bytes, kind)?;
        self.publish(event);
        Ok(Allocation::new(
            id,
            bytes,
            grant.size,
            grant.block,
            kind,
            self.clone(),
        ))
    }

    /// Like [`MemoryTracker::allocate`], for a buffer that lives in host memory from this
    /// tracker's allocator: the block is owned by the returned [`HostBlock`], the tracker entry
    /// by the [`Allocation`]. No block for 0 bytes. An error on a tracker without host memory
    /// (not the CPU).
    pub fn allocate_host(
        self: &Arc<Self>,
        bytes: u64,
        kind: MemoryKind,
    ) -> Result<(Allocation, Option<HostBlock>)> {
        let (allocation, lease) = self.allocate_leased(bytes, kind)?;
        let Some(lease) = lease else {
            return Ok((allocation, None));
        };
        match lease.into_host() {
            Some(block) => Ok((allocation, Some(block))),
            None => Err(self.no_memory("host", "cpu")),
        }
    }

    /// Like [`MemoryTracker::allocate_host`], for a buffer in GPU memory from a CUDA tracker's
    /// allocator: the block is owned by the returned [`DeviceBlock`]. No block for 0 bytes. An
    /// error on a tracker without GPU memory (not a CUDA device).
    pub fn allocate_device(
        self: &Arc<Self>,
        bytes: u64,
        kind: MemoryKind,
    ) -> Result<(Allocation, Option<DeviceBlock>)> {
        let (allocation, lease) = self.allocate_leased(bytes, kind)?;
        let Some(lease) = lease else {
            return Ok((allocation, None));
        };
        match lease.into_device() {
            Some(block) => Ok((allocation, Some(block))),
            None => Err(self.no_memory("GPU", "cuda")),
        }
    }

    /// Records an allocation whose block the returned lease owns (`None` for 0 bytes); an
    /// error, recording nothing, when the backing has no memory behind its segments.
    fn allocate_leased(
        self: &Arc<Self>,
        bytes: u64,
        kind: MemoryKind,
    ) -> Result<(Allocation, Option<BlockLease>)> {
        if self.counting && bytes > 0 {
            return Err(self.no_memory("host or GPU", "cpu or cuda"));
        }
        let (id, grant, event) = self.record_alloc(bytes, kind)?;
        let (lease, memoryless) = match (grant.block, grant.memory) {
            (Some(block), Some((segment, offset))) => (
                Some(BlockLease {
                    bytes: grant.size,
                    zeroed: grant.zeroed,
                    tracker: self.clone(),
                    block,
                    segment,
                    offset,
                }),
                false,
            ),
            (None, _) => (None, false),
            (Some(block), None) => {
                self.free_block(block);
                (None, true)
            }
        };
        // The entry owns no block: the lease does (or the request was empty).
        let allocation = Allocation::new(id, bytes, grant.size, None, kind, self.clone());
        self.publish(event);
        if memoryless {
            // Dropping `allocation` records the free of the entry just published.
            return Err(self.no_memory("host or GPU", "cpu or cuda"));
        }
        Ok((allocation, lease))
    }

    /// Gives `block` back to the allocator's cache (its segment stays reserved).
    pub(super) fn free_block(&self, block: BlockId) {
        self.lock().allocator.free(block);
    }

    fn no_memory(&self, what: &str, which: &str) -> CoreError {
        CoreError::invalid(
            "MemoryTracker::allocate",
            format!(
                "the {} tracker has no {what} memory behind its segments; only the {which} \
                 trackers do",
                self.device
            ),
        )
    }

    /// An error, recording nothing, when `bytes` more would take the requested, allocated or
    /// reserved count past `u64::MAX` (possible on Meta, whose sizes no real memory bounds).
    /// Checked against the largest block and segment the request can take, so the additions
    /// that follow cannot wrap.
    fn check_fits(&self, s: &TrackerState, bytes: u64) -> Result<()> {
        let block = crate::memory::caching::rules::round_size(bytes);
        let segment = block.and_then(|b| s.allocator.most_new_reserved(b));
        let fits = s.current.checked_add(bytes).is_some()
            && block.and_then(|b| s.allocated.checked_add(b)).is_some()
            && segment
                .and_then(|g| s.allocator.reserved().checked_add(g))
                .is_some();
        if fits {
            return Ok(());
        }
        let scope = current_scope();
        Err(CoreError::ByteCountOverflow {
            at: match scope.path() {
                "" => format!("the model ({})", scope.phase()),
                p => format!("module {p} ({})", scope.phase()),
            },
            device: self.device,
            held: s.current,
            bytes,
        })
    }

    fn record_alloc(
        &self,
        bytes: u64,
        kind: MemoryKind,
    ) -> Result<(AllocationId, Grant, Option<MemoryEvent>)> {
        let mut s = self.lock();
        self.check_fits(&s, bytes)?;
        let grant = if self.counting {
            Grant {
                block: None,
                size: bytes,
                memory: None,
                zeroed: false,
            }
        } else {
            self.malloc(&mut s, bytes)?
        };
        let id = AllocationId(s.next_id);
        s.next_id += 1;
        s.add(kind, bytes, grant.size);
        s.live += 1;
        let event = self.event(&mut s, MemoryAction::Alloc, id, bytes, grant.size, kind);
        Ok((id, grant, event))
    }

    /// A block of `bytes` from the caching allocator.
    fn malloc(&self, s: &mut TrackerState, bytes: u64) -> Result<Grant> {
        Ok(match s.allocator.malloc(bytes) {
            Ok(grant) => grant,
            Err(CoreError::OutOfMemory {
                bytes: segment_bytes, ..
            }) if self.device.is_cuda() => {
                return Err(CoreError::CudaOutOfMemory {
                    device: self.device,
                    bytes,
                    segment_bytes,
                    held: s.current,
                    reserved: s.allocator.reserved(),
                });
            }
            Err(e) => return Err(e),
        })
    }

    pub(super) fn record_free(&self, alloc: &Allocation, block: Option<BlockId>) {
        let event = {
            let mut s = self.lock();
            if let Some(block) = block {
                s.allocator.free(block);
            }
            s.remove(alloc.kind(), alloc.bytes(), alloc.allocated_bytes());
            s.live -= 1;
            self.event(
                &mut s,
                MemoryAction::Free,
                alloc.id(),
                alloc.bytes(),
                alloc.allocated_bytes(),
                alloc.kind(),
            )
        };
        self.publish(event);
    }

    pub(super) fn record_retag(&self, alloc: &Allocation, from: MemoryKind, to: MemoryKind) {
        let (bytes, allocated) = (alloc.bytes(), alloc.allocated_bytes());
        let event = {
            let mut s = self.lock();
            s.remove(from, bytes, allocated);
            s.add(to, bytes, allocated);
            self.event(
                &mut s,
                MemoryAction::Retag { from },
                alloc.id(),
                bytes,
                allocated,
                to,
            )
        };
        self.publish(event);
    }

    fn event(
        &self,
        s: &mut TrackerState,
        action: MemoryAction,
        allocation: AllocationId,
        bytes: u64,
        allocated: u64,
        kind: MemoryKind,
    ) -> Option<MemoryEvent> {
        let seq = s.seq;
        s.seq += 1;
        // Nobody to deliver it to: the scope and clock reads are skipped (the sequence number
        // still counts the event).
        if self
            .subscribers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return None;
        }
        Some(MemoryEvent {
            seq,
            action,
            allocation,
            bytes,
            allocated,
            kind,
            device: self.device,
            scope: current_scope(),
            current_bytes: s.current,
            current_allocated: s.allocated,
            current_reserved: s.allocator.reserved(),
            time_ns: self.created.elapsed().as_nanos() as u64,
        })
    }

    fn publish(&self, event: Option<MemoryEvent>) {
        let Some(event) = event else {
            return;
        };
        let subs = self.subscribers.read().unwrap_or_else(|e| e.into_inner()).clone();
        for (_, sub) in subs.iter() {
            sub.on_event(&event);
        }
    }

    /// Bytes held now.
    pub fn current_bytes(&self) -> u64 {
        self.lock().current
    }

    /// Most bytes held at once since creation or the last [`MemoryTracker::reset_peak`].
    pub fn peak_bytes(&self) -> u64 {
        self.lock().peak
    }

    /// Allocated (block) bytes held now.
    pub fn allocated_bytes(&self) -> u64 {
        self.lock().allocated
    }

    /// Most allocated bytes held at once since creation or the last reset.
    pub fn allocated_peak_bytes(&self) -> u64 {
        self.lock().allocated_peak
    }

    /// Reserved bytes held now (in segments, or mapped into expandable ranges).
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().allocator.reserved()
    }

    /// Most reserved bytes held at once since creation or the last reset.
    pub fn reserved_peak_bytes(&self) -> u64 {
        self.lock().reserved_peak
    }

    /// Bounds the bytes this tracker's caching allocator holds in segments, as a device of
    /// `limit` bytes would (`None`: unbounded, the default): at the limit it releases its cached
    /// free segments and retries, as PyTorch's allocator does when the device is full, and an
    /// allocation that still does not fit fails with [`CoreError::ReserveLimit`]. Meta replays
    /// the rule exactly, so a step that fits a limit on Meta fits it on the device.
    pub fn set_reserve_limit(&self, limit: Option<u64>) {
        self.lock().allocator.set_reserve_limit(limit);
    }

    /// The reserve limit in bytes, if one is set ([`Self::set_reserve_limit`]).
    pub fn reserve_limit(&self) -> Option<u64> {
        self.lock().allocator.reserve_limit()
    }

    /// Gives every cached segment without an allocated block back to the device, and with
    /// expandable segments every whole free page (PyTorch's `torch.cuda.empty_cache`); returns
    /// the bytes released. Free bytes sharing a page with a live block stay mapped. The allocator's decisions
    /// after this depend only on the buffers alive, so a step measured from an emptied cache
    /// reserves the same on every device.
    pub fn empty_cache(&self) -> u64 {
        self.lock().allocator.empty_cache()
    }

    /// A snapshot of all figures.
    pub fn stats(&self) -> MemoryStats {
        let s = self.lock();
        MemoryStats {
            device: self.device,
            current: s.current,
            peak: s.peak,
            allocated: s.allocated,
            allocated_peak: s.allocated_peak,
            reserved: s.allocator.reserved(),
            reserved_peak: s.reserved_peak,
            segments: s.allocator.segment_count() as u64,
            by_kind: s.by_kind,
            live_allocations: s.live,
            events: s.seq,
        }
    }

    /// The caching allocator's layout now: its segments and blocks as the rules see them. Two
    /// trackers with equal layouts, holding the same buffers in them, place every later request
    /// alike.
    pub fn allocator_layout(&self) -> crate::memory::caching::AllocatorLayout {
        self.lock().allocator.layout()
    }

    /// Sets every peak (requested, allocated, reserved; overall and per kind) to the current
    /// value.
    pub fn reset_peak(&self) {
        let mut s = self.lock();
        s.peak = s.current;
        s.allocated_peak = s.allocated;
        s.reserved_peak = s.allocator.reserved();
        for k in s.by_kind.iter_mut() {
            k.peak = k.current;
            k.allocated_peak = k.allocated;
        }
    }

    /// Adds a subscriber; it receives every event until the returned [`Subscription`] drops.
    pub fn subscribe(self: &Arc<Self>, subscriber: Arc<dyn MemorySubscriber>) -> Subscription {
        let id = {
            let mut n = self.next_subscription.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            *n
        };
        let mut subs = self.subscribers.write().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<_> = subs.iter().cloned().collect();
        list.push((id, subscriber));
        *subs = Arc::from(list);
        Subscription {
            tracker: self.clone(),
            id,
        }
    }

    fn unsubscribe(&self, id: u64) {
        let mut subs = self.subscribers.write().unwrap_or_else(|e| e.into_inner());
        let list: Vec<_> = subs.iter().filter(|(i, _)| *i != id).cloned().collect();
        *subs = Arc::from(list);
    }
}

/// Keeps a subscriber attached; detaches it when dropped.
#[must_use = "the subscriber is detached when the subscription is dropped"]
pub struct Subscription {
    tracker: Arc<MemoryTracker>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.tracker.unsubscribe(self.id);
    }
}
