//! Batches prepared on a background thread while the training step runs: the thread reads
//! and integrates samples into host vectors `[T, N, C, H, W]`; the caller turns them into
//! tensors on its own thread (memory tracking is per thread).

use crate::budget::{filled, with_capacity};
use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use memopt_core::{Philox, RngState};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// One batch on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// `[T, N, C, H, W]` values, row-major.
    pub input: Vec<f32>,
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
/// and the batch itself), the one waiting in the channel and the one the caller holds.
pub const BATCHES_IN_FLIGHT: u64 = 4;

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

/// Builds one batch of `indices` with `time_steps` frames per sample.
pub fn make_batch(data: &Dataset, indices: &[usize], time_steps: usize) -> Result<HostBatch> {
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
    let mut input = filled(t * n * per_step, 0f32)?;
    for (b, f) in frames.iter().enumerate() {
        for s in 0..t {
            input[(s * n + b) * per_step..(s * n + b + 1) * per_step]
                .copy_from_slice(&f.data[s * per_step..(s + 1) * per_step]);
        }
    }
    Ok(HostBatch {
        input,
        dims: vec![t, n, c, h, w],
        labels: indices.iter().map(|&i| data.samples[i].1 as i64).collect(),
        indices: indices.to_vec(),
    })
}

/// Iterates over the batches of `order`, each prepared on a background thread one batch
/// ahead of the caller (the thread stops when the loader is dropped).
pub struct BatchLoader {
    rx: Receiver<Result<HostBatch>>,
    worker: Option<JoinHandle<()>>,
}

impl BatchLoader {
    /// Batches of `batch_size` samples of `order` (the last one smaller unless `drop_last`).
    pub fn spawn(
        data: Arc<Dataset>,
        order: Vec<usize>,
        batch_size: usize,
        time_steps: usize,
        drop_last: bool,
    ) -> Result<BatchLoader> {
        if batch_size == 0 {
            return Err(DataError::Invalid("batch size must be at least 1".into()));
        }
        let (tx, rx): (SyncSender<Result<HostBatch>>, _) = sync_channel(1);
        let worker = std::thread::Builder::new()
            .name("memopt-batches".into())
            .spawn(move || {
                for chunk in order.chunks(batch_size) {
                    if drop_last && chunk.len() < batch_size {
                        break;
                    }
                    let batch = make_batch(&data, chunk, time_steps);
                    let failed = batch.is_err();
                    if tx.send(batch).is_err() || failed {
                        break;
                    }
                }
            })
            .map_err(|e| DataError::Invalid(format!("cannot start the batch thread: {e}")))?;
        Ok(BatchLoader {
            rx,
            worker: Some(worker),
        })
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
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
