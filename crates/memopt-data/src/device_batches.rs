//! Batches on the training device, in the order the loader makes them. On a GPU target the
//! next batch is allocated before the current one trains and uploaded meanwhile on the GPU's
//! copy stream ([`memopt_core::Target::batches_ahead`]); Meta allocates the same tensors with
//! no values, so it predicts the device's memory exactly.

use crate::error::{DataError, Result};
use crate::loader::{BatchLoader, BatchValues, HostBatch, PinnedBatch};
use memopt_checkpoint::{Batch, Target as LossTarget};
use memopt_core::{DType, Device, MemoryKind, PendingTensor, Tensor};
use std::collections::VecDeque;

/// One batch on the training device, with its labels and dataset indices on the host.
#[derive(Debug)]
pub struct DeviceBatch {
    /// Input and labels on the device.
    pub batch: Batch,
    /// Label of each sample.
    pub labels: Vec<i64>,
    /// Dataset index of each sample.
    pub indices: Vec<usize>,
}

/// A batch whose upload may still be in flight.
struct Staged {
    input: PendingTensor,
    labels: PendingTensor,
    host_labels: Vec<i64>,
    indices: Vec<usize>,
}

impl Staged {
    fn ready(self) -> Result<DeviceBatch> {
        Ok(DeviceBatch {
            batch: Batch {
                input: self.input.ready()?,
                target: LossTarget::Labels(self.labels.ready()?),
            },
            labels: self.host_labels,
            indices: self.indices,
        })
    }
}

/// The loader's batches as device tensors, [`memopt_core::Target::batches_ahead`] of them
/// allocated (and on a GPU, uploading) ahead of the one handed out.
pub struct DeviceBatches {
    loader: BatchLoader,
    device: Device,
    ahead: VecDeque<Staged>,
    depth: usize,
    /// Page-locked buffers the loader no longer takes back (its last batches): kept for the
    /// next pass when this one ends.
    spent: Vec<PinnedBatch>,
    /// Set after an error: the iterator ends.
    failed: bool,
}

impl DeviceBatches {
    /// The batches of `loader` on `device`.
    pub fn new(loader: BatchLoader, device: Device) -> DeviceBatches {
        DeviceBatches {
            loader,
            device,
            ahead: VecDeque::new(),
            depth: device.target().batches_ahead(),
            spent: Vec::new(),
            failed: false,
        }
    }

    /// Takes the next host batch and allocates its device tensors (input, then labels).
    fn stage_next(&mut self) -> Option<Result<Staged>> {
        let host = self.loader.next()?;
        Some(host.and_then(|h| self.stage(h)))
    }

    fn stage(&mut self, host: HostBatch) -> Result<Staged> {
        let HostBatch {
            input,
            dims,
            labels,
            indices,
        } = host;
        let n = labels.len();
        let (input, label_tensor) = match (input, self.device) {
            (BatchValues::Host(values), device @ Device::Cpu) => (
                Tensor::from_vec(values, dims, device, MemoryKind::Input)?,
                Tensor::from_vec(labels.clone(), vec![n], device, MemoryKind::Input)?,
            ),
            (BatchValues::Shapes, device @ Device::Meta(_)) => (
                Tensor::zeros(dims, DType::F32, device, MemoryKind::Input)?,
                Tensor::zeros([n], DType::I64, device, MemoryKind::Input)?,
            ),
            (BatchValues::Pinned(mut pinned), Device::Cuda(_)) => {
                let input = Tensor::upload_pinned(&mut pinned.input, dims, MemoryKind::Input)?;
                let labels_up = Tensor::upload_pinned(&mut pinned.labels, [n], MemoryKind::Input)?;
                // Queued: the buffers wait for their uploads before the loader writes again.
                self.spent.extend(self.loader.recycle(pinned));
                return Ok(Staged {
                    input,
                    labels: labels_up,
                    host_labels: labels,
                    indices,
                });
            }
            (_, device) => {
                return Err(DataError::Invalid(format!(
                    "the loader staged a batch for another device than {device}"
                )));
            }
        };
        Ok(Staged {
            input: PendingTensor::now(input),
            labels: PendingTensor::now(label_tensor),
            host_labels: labels,
            indices,
        })
    }
}

impl Drop for DeviceBatches {
    fn drop(&mut self) {
        // The pass is over: its last buffers serve the next pass (they wait for their uploads
        // before being written again).
        for pinned in self.spent.drain(..) {
            crate::loader::keep_for_later(pinned);
        }
    }
}

impl Iterator for DeviceBatches {
    type Item = Result<DeviceBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.advance();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

impl DeviceBatches {
    /// The next batch, the ones after it staged first.
    fn advance(&mut self) -> Option<Result<DeviceBatch>> {
        let current = match self.ahead.pop_front() {
            Some(s) => s,
            None => match self.stage_next()? {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            },
        };
        // The batches after this one are allocated (and start uploading) before it trains.
        while self.ahead.len() < self.depth {
            match self.stage_next() {
                None => break,
                Some(Ok(s)) => self.ahead.push_back(s),
                Some(Err(e)) => return Some(Err(e)),
            }
        }
        Some(current.ready())
    }
}
