//! Batches prepared on a background thread while the training step runs: the thread reads
//! and integrates samples into host memory `[T, N, C, H, W]` (page-locked for a GPU, so that
//! its upload can overlap the step); the caller turns them into tensors on its own thread
//! (memory tracking is per thread). For Meta the thread reads nothing: batches are shapes.

use crate::budget::{filled, with_capacity};
use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use memopt_core::storage::PinnedBuffer;
use memopt_core::{Device, Philox, RngState};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Where the loader thread puts a batch's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staging {
    /// Host vectors (training on the CPU).
    Host,
    /// Page-locked buffers of GPU `ordinal`, reused once their upload has read them.
    Pinned {
        /// The GPU.
        ordinal: usize,
        /// One sample's dimensions, time first (sizes the buffers).
        sample: Vec<usize>,
    },
    /// No values: each sample has the dimensions `sample` (`[T, C, H, W]` or `[T, features]`),
    /// and nothing is read (Meta).
    Shapes {
        /// One sample's dimensions, time first.
        sample: Vec<usize>,
    },
}

impl Staging {
    /// The staging for training on `device`, whose samples have dimensions `sample` (time
    /// first: it sizes page-locked buffers, and is all Meta knows of a sample).
    pub fn for_device(device: Device, sample: &[usize]) -> Staging {
        match device {
            Device::Cpu => Staging::Host,
            Device::Cuda(ordinal) => Staging::Pinned {
                ordinal,
                sample: sample.to_vec(),
            },
            Device::Meta(_) => Staging::Shapes {
                sample: sample.to_vec(),
            },
        }
    }
}

/// A batch's page-locked input and labels, sized for a whole batch.
#[derive(Debug)]
pub struct PinnedBatch {
    /// Input values (a smaller last batch uses the front).
    pub input: PinnedBuffer<f32>,
    /// Labels.
    pub labels: PinnedBuffer<i64>,
}

/// A batch's values as the loader staged them.
#[derive(Debug)]
pub enum BatchValues {
    /// Host vectors: the input, row-major.
    Host(Vec<f32>),
    /// Page-locked buffers (input and labels at their front); hand them back with
    /// [`BatchLoader::recycle`] once their upload is queued.
    Pinned(PinnedBatch),
    /// No values (Meta).
    Shapes,
}

/// One batch on the host.
#[derive(Debug)]
pub struct HostBatch {
    /// `[T, N, C, H, W]` values.
    pub input: BatchValues,
    /// `[T, N, C, H, W]`.
    pub dims: Vec<usize>,
    /// Label of each sample.
    pub labels: Vec<i64>,
    /// Dataset index of each sample.
    pub indices: Vec<usize>,
}

/// `order` shuffled with a Fisher-Yates pass drawn from Philox stream `seed`, at a position
/// set by `epoch` (the same seed and epoch give the same order, on any machine).
pub fn shuffled(order: &[usize], seed: u64, epoch: u64) -> Vec<usize> {
    let mut out = order.to_vec();
    let mut rng = Philox::from_state(RngState {
        seed,
        offset: epoch << 40,
    });
    for i in (1..out.len()).rev() {
        let j = (u64::from(rng.reserve(1).bits_at(0)) % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

/// Host batches the loader holds at most at once: the one being built (its samples' frames
/// and the batch itself), the one waiting in the channel and the one the caller holds (or,
/// page-locked, the one whose upload is in flight).
pub const BATCHES_IN_FLIGHT: u64 = 4;

/// Page-locked batches the loader allocates at most for one GPU: the one being filled, the
/// one waiting in the channel and the one being uploaded.
pub const PINNED_BATCHES: usize = 3;

/// Bytes the loader holds at most at once for batches of `batch_size` samples of frames
/// `sample` (`[T, C, H, W]`, `f32`): [`BATCHES_IN_FLIGHT`] batches, from checked arithmetic.
pub fn loader_bytes(batch_size: usize, sample: [usize; 4]) -> Result<u64> {
    sample
        .iter()
        .try_fold(batch_size as u64, |a, &d| a.checked_mul(d as u64))
        .and_then(|v| v.checked_mul(4 * BATCHES_IN_FLIGHT))
        .ok_or_else(|| {
            DataError::Invalid(format!(
                "batches of {batch_size} samples of frames {sample:?} exceed 2^64 - 1 bytes"
            ))
        })
}

/// Builds one batch of `indices` with `time_steps` frames per sample into host vectors.
pub fn make_batch(data: &Dataset, indices: &[usize], time_steps: usize) -> Result<HostBatch> {
    let (input, dims) = read_batch(data, indices, time_steps, |len| filled(len, 0f32))?;
    Ok(HostBatch {
        input: BatchValues::Host(input),
        dims,
        labels: labels_of(data, indices),
        indices: indices.to_vec(),
    })
}

fn labels_of(data: &Dataset, indices: &[usize]) -> Vec<i64> {
    indices.iter().map(|&i| data.samples[i].1 as i64).collect()
}

/// The batch of `indices` with its values unread: dimensions `[T, N, ...]` from `sample`.
fn shape_batch(data: &Dataset, indices: &[usize], sample: &[usize]) -> HostBatch {
    let mut dims = Vec::with_capacity(sample.len() + 1);
    dims.push(sample.first().copied().unwrap_or(1));
    dims.push(indices.len());
    dims.extend_from_slice(sample.get(1..).unwrap_or(&[]));
    HostBatch {
        input: BatchValues::Shapes,
        dims,
        labels: labels_of(data, indices),
        indices: indices.to_vec(),
    }
}

/// Reads the frames of `indices` and writes them `[T, N, ...]` into the buffer `make(len)`
/// gives (at least `len` elements, written from the front); returns it and the dimensions.
fn read_batch<B: AsMut<[f32]>>(
    data: &Dataset,
    indices: &[usize],
    time_steps: usize,
    make: impl FnOnce(usize) -> Result<B>,
) -> Result<(B, Vec<usize>)> {
    let mut frames = with_capacity(indices.len())?;
    for &i in indices {
        let f = data.frames(i)?;
        if f.dims[0] != time_steps {
            return Err(DataError::file(
                &data.samples[i].0,
                format!("has {} frames, the model takes T={time_steps}", f.dims[0]),
            ));
        }
        if let Some(first) = frames.first().map(|f: &crate::frames::Frames| f.dims)
            && f.dims != first
        {
            return Err(DataError::file(
                &data.samples[i].0,
                format!("frames {:?} differ from the batch's {first:?}", f.dims),
            ));
        }
        frames.push(f);
    }
    let [t, c, h, w] = frames[0].dims;
    let n = frames.len();
    let per_step = c * h * w;
    let mut buffer = make(t * n * per_step)?;
    let input = buffer.as_mut();
    for (b, f) in frames.iter().enumerate() {
        for s in 0..t {
            input[(s * n + b) * per_step..(s * n + b + 1) * per_step]
                .copy_from_slice(&f.data[s * per_step..(s + 1) * per_step]);
        }
    }
    Ok((buffer, vec![t, n, c, h, w]))
}

/// The page-locked batches of one GPU: reused once handed back, allocated (for whole batches
/// of `per_batch` input values) up to [`PINNED_BATCHES`].
struct PinnedPool {
    ordinal: usize,
    per_batch: usize,
    batch_size: usize,
    allocated: usize,
    returned: Receiver<PinnedBatch>,
}

/// Page-locked batches a finished pass left, for the next pass of the process (allocating and
/// locking them again would cost every epoch milliseconds per megabyte). At most
/// [`PINNED_BATCHES`] are kept.
static SPARE: Mutex<Vec<PinnedBatch>> = Mutex::new(Vec::new());

/// Keeps `pinned` for a later pass (or drops it when enough are kept already).
pub fn keep_for_later(pinned: PinnedBatch) {
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    if spare.len() < PINNED_BATCHES {
        spare.push(pinned);
    }
}

impl PinnedPool {
    /// A kept batch of this GPU large enough for this pass's batches.
    fn spare(&self) -> Option<PinnedBatch> {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        let fits = |b: &PinnedBatch| {
            b.input.ordinal() == self.ordinal
                && b.input.len() >= self.per_batch
                && b.labels.len() >= self.batch_size
        };
        let at = spare.iter().position(fits)?;
        Some(spare.swap_remove(at))
    }

    /// A batch's buffers: kept or new ones up to [`PINNED_BATCHES`] (a returned one may still
    /// be uploading), then the returned ones.
    fn take(&mut self) -> Result<PinnedBatch> {
        if self.allocated < PINNED_BATCHES {
            self.allocated += 1;
            if let Some(kept) = self.spare() {
                return Ok(kept);
            }
            return Ok(PinnedBatch {
                input: PinnedBuffer::new(self.ordinal, self.per_batch)?,
                labels: PinnedBuffer::new(self.ordinal, self.batch_size)?,
            });
        }
        self.returned.recv().map_err(|_| {
            DataError::Invalid("the training loop stopped handing page-locked batches back".into())
        })
    }

    /// Reads the batch of `indices` into page-locked buffers.
    fn make(&mut self, data: &Dataset, indices: &[usize], time_steps: usize) -> Result<HostBatch> {
        let mut pinned = self.take()?;
        let room = pinned.input.len();
        let (_, dims) = read_batch(data, indices, time_steps, |len| {
            if len > room {
                return Err(DataError::Invalid(format!(
                    "a batch of {len} values does not fit the page-locked buffer of {room}: \
                     its samples' frames are larger than the model's"
                )));
            }
            Ok(PinnedSlice(pinned.input.host_mut()?))
        })?;
        let labels = labels_of(data, indices);
        pinned.labels.host_mut()?[..labels.len()].copy_from_slice(&labels);
        Ok(HostBatch {
            input: BatchValues::Pinned(pinned),
            dims,
            labels,
            indices: indices.to_vec(),
        })
    }
}

impl Drop for PinnedPool {
    fn drop(&mut self) {
        for pinned in self.returned.try_iter() {
            keep_for_later(pinned);
        }
    }
}

/// What the loader thread stages batches into ([`Staging`], with the pool of page-locked
/// buffers it owns).
enum Stager {
    Host,
    Pinned(PinnedPool),
    Shapes(Vec<usize>),
}

/// A page-locked buffer's elements, as the batch writer sees them.
struct PinnedSlice<'a>(&'a mut [f32]);

impl AsMut<[f32]> for PinnedSlice<'_> {
    fn as_mut(&mut self) -> &mut [f32] {
        self.0
    }
}

/// Iterates over the batches of `order`, each prepared on a background thread one batch
/// ahead of the caller (the thread stops when the loader is dropped).
pub struct BatchLoader {
    rx: Receiver<Result<HostBatch>>,
    recycle: Option<Sender<PinnedBatch>>,
    worker: Option<JoinHandle<()>>,
}

impl BatchLoader {
    /// Batches of `batch_size` samples of `order` (the last one smaller unless `drop_last`),
    /// with `time_steps` frames per sample, staged as `staging` says.
    pub fn spawn(
        data: Arc<Dataset>,
        order: Vec<usize>,
        batch_size: usize,
        time_steps: usize,
        staging: Staging,
        drop_last: bool,
    ) -> Result<BatchLoader> {
        if batch_size == 0 {
            return Err(DataError::Invalid("batch size must be at least 1".into()));
        }
        let (tx, rx): (SyncSender<Result<HostBatch>>, _) = sync_channel(1);
        let mut recycle = None;
        let mut stager = match staging {
            Staging::Host => Stager::Host,
            Staging::Shapes { sample } => Stager::Shapes(sample),
            Staging::Pinned { ordinal, sample } => {
                let per_batch = sample
                    .iter()
                    .try_fold(batch_size, |a, &d| a.checked_mul(d))
                    .ok_or_else(|| {
                        DataError::Invalid(format!(
                            "batches of {batch_size} samples of {sample:?} exceed the address space"
                        ))
                    })?;
                let (back, returned) = channel();
                recycle = Some(back);
                Stager::Pinned(PinnedPool {
                    ordinal,
                    per_batch,
                    batch_size,
                    allocated: 0,
                    returned,
                })
            }
        };
        let worker = std::thread::Builder::new()
            .name("memopt-batches".into())
            .spawn(move || {
                for chunk in order.chunks(batch_size) {
                    if drop_last && chunk.len() < batch_size {
                        break;
                    }
                    let batch = match &mut stager {
                        Stager::Host => make_batch(&data, chunk, time_steps),
                        Stager::Pinned(pool) => pool.make(&data, chunk, time_steps),
                        Stager::Shapes(sample) => Ok(shape_batch(&data, chunk, sample)),
                    };
                    let failed = batch.is_err();
                    if tx.send(batch).is_err() || failed {
                        break;
                    }
                }
            })
            .map_err(|e| DataError::Invalid(format!("cannot start the batch thread: {e}")))?;
        Ok(BatchLoader {
            rx,
            recycle,
            worker: Some(worker),
        })
    }

    /// Hands page-locked buffers back for later batches (once their upload is queued: they
    /// wait for it before being written again). Gives them back when the worker has made its
    /// last batch: the caller keeps them until their uploads are surely done (dropping them
    /// waits for the upload).
    pub fn recycle(&self, pinned: PinnedBatch) -> Option<PinnedBatch> {
        match &self.recycle {
            Some(back) => back.send(pinned).err().map(|e| e.0),
            None => Some(pinned),
        }
    }
}

impl Iterator for BatchLoader {
    type Item = Result<HostBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.rx.recv().ok()
    }
}

impl Drop for BatchLoader {
    fn drop(&mut self) {
        // Dropping the receiver first makes a blocked send fail, so the worker exits.
        let (_, dummy) = sync_channel(0);
        drop(std::mem::replace(&mut self.rx, dummy));
        // A worker waiting for a page-locked buffer wakes up to a closed channel.
        drop(self.recycle.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
