//! Epochs over a dataset: seeded shuffling, batches from the background loader, a learning
//! rate schedule as SpikingJelly's examples use (cosine annealing or step decay, set once per
//! epoch), loss and accuracy per epoch on the training and test splits, and evaluation.

use crate::dataset::Dataset;
use crate::device_batches::{DeviceBatch, DeviceBatches};
use crate::error::{DataError, Result};
use crate::loader::{BatchLoader, Staging, shuffled};
use memopt_checkpoint::{Cx, Model, Recording, StepOptions, Trainer};
use memopt_core::Philox;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the learning rate changes from epoch to epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// The base rate throughout.
    Constant,
    /// `torch.optim.lr_scheduler.CosineAnnealingLR(T_max=t_max, eta_min=0)`:
    /// `base * (1 + cos(pi * epoch / t_max)) / 2`.
    Cosine {
        /// Epochs of the half period.
        t_max: u64,
    },
    /// `StepLR(step_size, gamma)`: `base * gamma^(epoch / step_size)`.
    Step {
        /// Epochs between decays.
        step_size: u64,
        /// Factor per decay.
        gamma: f64,
    },
}

impl Schedule {
    /// Learning rate of `epoch` (0-based) from `base`.
    pub fn rate(&self, base: f32, epoch: u64) -> f32 {
        let base = f64::from(base);
        let lr = match *self {
            Schedule::Constant => base,
            Schedule::Cosine { t_max } => {
                base * (1.0 + (std::f64::consts::PI * epoch as f64 / t_max.max(1) as f64).cos()) / 2.0
            }
            Schedule::Step { step_size, gamma } => base * gamma.powf((epoch / step_size.max(1)) as f64),
        };
        lr as f32
    }
}

/// Loss and accuracy over a split.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SplitMetrics {
    /// Mean loss per sample (NaN on Meta, which has no values).
    pub loss: f64,
    /// Fraction of samples whose largest output is their label (NaN on Meta).
    pub accuracy: f64,
    /// Samples seen.
    pub samples: usize,
}

/// What the training loop reports after each step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepDone {
    /// Steps done in this epoch (from 1).
    pub step: usize,
    /// Steps in this epoch.
    pub steps: usize,
    /// Samples in the step's batch.
    pub samples: usize,
    /// The step's loss (`None` on Meta).
    pub loss: Option<f32>,
}

/// Wall time of a training loop, and how much of it waited for the next batch.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoopTime {
    /// Seconds from the first batch asked for to the last step's end.
    pub seconds: f64,
    /// Seconds spent waiting for batches (the loader thread, staging and allocation).
    pub waiting_seconds: f64,
}

/// Sums of loss and correct predictions, weighted by batch size.
#[derive(Debug, Default)]
struct Tally {
    loss: f64,
    correct: usize,
    samples: usize,
}

impl Tally {
    fn add(&mut self, mean_loss: f64, rates: &[f32], labels: &[i64]) {
        let n = labels.len();
        self.loss += mean_loss * n as f64;
        self.samples += n;
        let classes = rates.len() / n.max(1);
        for (row, &label) in rates.chunks(classes.max(1)).zip(labels) {
            let best = row.iter().enumerate().fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            );
            self.correct += usize::from(best.0 as i64 == label);
        }
    }

    /// Counts samples whose values Meta does not have.
    fn add_unseen(&mut self, n: usize) {
        self.samples += n;
    }

    fn metrics(&self, has_data: bool) -> SplitMetrics {
        let n = self.samples.max(1) as f64;
        let (loss, accuracy) = if has_data {
            (self.loss / n, self.correct as f64 / n)
        } else {
            (f64::NAN, f64::NAN)
        };
        SplitMetrics {
            loss,
            accuracy,
            samples: self.samples,
        }
    }
}

/// The batches of `order` on `model`'s device (read on a background thread, staged as the
/// device needs: page-locked on a GPU, shapes only on Meta).
pub fn device_batches(
    model: &Model,
    data: &Arc<Dataset>,
    order: Vec<usize>,
    batch_size: usize,
) -> Result<DeviceBatches> {
    let spec = model.spec();
    let mut sample = vec![spec.time_steps];
    sample.extend_from_slice(&spec.sample);
    let staging = Staging::for_device(model.device(), &sample);
    let loader = BatchLoader::spawn(data.clone(), order, batch_size, spec.time_steps, staging, false)?;
    Ok(DeviceBatches::new(loader, model.device()))
}

/// The first few dataset indices of a batch, for an error.
fn some_samples(indices: &[usize]) -> String {
    let shown: Vec<String> = indices.iter().take(8).map(ToString::to_string).collect();
    let more = if indices.len() > 8 { ", ..." } else { "" };
    format!("samples [{}{more}]", shown.join(", "))
}

/// One training epoch: the learning rate set by `schedule`, samples of `train` shuffled by
/// `(seed, epoch)`, batches of `batch_size` (a smaller last batch kept), `on_step` after every
/// step (the loss is `None` on Meta, which allocates as the device would and computes nothing).
#[allow(clippy::too_many_arguments)]
pub fn train_epoch(
    model: &Model,
    trainer: &mut Trainer,
    data: &Arc<Dataset>,
    train: &[usize],
    epoch: u64,
    seed: u64,
    batch_size: usize,
    on_step: &mut dyn FnMut(&StepDone),
) -> Result<(SplitMetrics, LoopTime)> {
    let order = shuffled(train, seed, epoch);
    let steps = order.len().div_ceil(batch_size.max(1));
    let has_data = !model.device().is_meta();
    let started = Instant::now();
    let mut waiting = Duration::ZERO;
    let mut batches = device_batches(model, data, order, batch_size)?;
    let mut tally = Tally::default();
    let opts = StepOptions {
        keep_output: true,
        ..StepOptions::default()
    };
    for i in 0.. {
        let asked = Instant::now();
        let Some(batch) = batches.next() else { break };
        waiting += asked.elapsed();
        let DeviceBatch {
            batch,
            labels,
            indices,
        } = batch?;
        let out = trainer.step(model, &batch, opts)?;
        drop(batch);
        match out.loss {
            // Meta has no values.
            None => tally.add_unseen(labels.len()),
            Some(loss) if !loss.is_finite() => {
                // Frames and loaded weights are checked finite: the training itself diverged.
                return Err(DataError::Invalid(format!(
                    "the loss became {loss} at epoch {}, step {} ({}): training diverged; lower the learning rate",
                    epoch + 1,
                    i + 1,
                    some_samples(&indices)
                )));
            }
            Some(loss) => {
                let rates = out
                    .output
                    .map(|t| t.to_vec_f32())
                    .transpose()?
                    .unwrap_or_default();
                tally.add(f64::from(loss), &rates, &labels);
            }
        }
        on_step(&StepDone {
            step: i + 1,
            steps,
            samples: labels.len(),
            loss: out.loss,
        });
    }
    let time = LoopTime {
        seconds: started.elapsed().as_secs_f64(),
        waiting_seconds: waiting.as_secs_f64(),
    };
    Ok((tally.metrics(has_data), time))
}

/// Evaluation without a tape, BatchNorm on its running statistics and dropout off: loss and
/// accuracy over `indices`, and the time-averaged outputs `[samples, classes]` in order (on
/// Meta: the allocations alone, NaN metrics and no outputs).
pub fn evaluate(
    model: &Model,
    data: &Arc<Dataset>,
    indices: &[usize],
    batch_size: usize,
) -> Result<(SplitMetrics, Vec<f32>)> {
    check_classes(model, data)?;
    let has_data = !model.device().is_meta();
    let batches = device_batches(model, data, indices.to_vec(), batch_size)?;
    let mut tally = Tally::default();
    let mut outputs = Vec::new();
    for batch in batches {
        let DeviceBatch {
            batch,
            labels,
            indices: batch_indices,
        } = batch?;
        model.check_input(&batch.input)?;
        let mut cx = Cx::new(
            model.device(),
            model.policies(),
            Philox::new(0),
            Recording::Off,
            false,
        );
        let x = cx.leaf(batch.input, false);
        let y = model.forward(&mut cx, x)?;
        if !has_data {
            tally.add_unseen(labels.len());
            continue;
        }
        let d = y.dims().to_vec();
        let values = y.tensor()?.to_vec_f32()?;
        let rates = time_mean(&values, &d);
        let loss = mean_cross_entropy(&rates, &labels);
        if !loss.is_finite() {
            return Err(DataError::Invalid(format!(
                "the model's outputs give a loss of {loss} on {}: the weights or the frames hold values \
                 too large for f32",
                some_samples(&batch_indices)
            )));
        }
        tally.add(loss, &rates, &labels);
        outputs.extend_from_slice(&rates);
    }
    Ok((tally.metrics(has_data), outputs))
}

/// `[T, N, C]` -> mean over T (`[N, C]` passes through).
fn time_mean(values: &[f32], dims: &[usize]) -> Vec<f32> {
    if dims.len() < 3 {
        return values.to_vec();
    }
    let t = dims[0];
    let per_step = values.len() / t.max(1);
    let mut out = vec![0f64; per_step];
    for s in 0..t {
        for (o, v) in out.iter_mut().zip(&values[s * per_step..(s + 1) * per_step]) {
            *o += f64::from(*v);
        }
    }
    out.into_iter().map(|v| (v / t as f64) as f32).collect()
}

/// Mean cross-entropy of `rates` `[N, C]` against `labels` (log-softmax in f64).
fn mean_cross_entropy(rates: &[f32], labels: &[i64]) -> f64 {
    let n = labels.len().max(1);
    let classes = rates.len() / n;
    let mut total = 0.0;
    for (row, &label) in rates.chunks(classes.max(1)).zip(labels) {
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let lse = max + row.iter().map(|&v| (f64::from(v) - max).exp()).sum::<f64>().ln();
        total += lse - f64::from(row[label as usize]);
    }
    total / n as f64
}

/// The settings that stay fixed over a run's epochs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochPlan {
    /// Learning rate of epoch 0, before the schedule.
    pub base_lr: f32,
    /// How the rate changes per epoch.
    pub schedule: Schedule,
    /// Seed of the shuffling.
    pub seed: u64,
    /// Samples per batch.
    pub batch_size: usize,
}

/// What one epoch measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochMetrics {
    /// Epoch (0-based).
    pub epoch: u64,
    /// Learning rate used.
    pub lr: f32,
    /// Training split (loss and accuracy of the steps as they ran).
    pub train: SplitMetrics,
    /// The training loop's wall time and its wait for batches.
    pub train_time: LoopTime,
    /// Test split, evaluated after the epoch (`None` when the split is empty).
    pub test: Option<SplitMetrics>,
}

/// Checks that the dataset's labels fit the model's classes.
pub fn check_classes(model: &Model, data: &Dataset) -> Result<()> {
    if data.classes.len() > model.spec().classes {
        return Err(DataError::Invalid(format!(
            "the dataset has {} classes but model '{}' outputs {}; give the model at least {} classes",
            data.classes.len(),
            model.name(),
            model.spec().classes,
            data.classes.len()
        )));
    }
    Ok(())
}

/// One epoch: sets the scheduled learning rate, trains on `train`, evaluates on `test`.
#[allow(clippy::too_many_arguments)]
pub fn run_epoch(
    model: &Model,
    trainer: &mut Trainer,
    data: &Arc<Dataset>,
    train: &[usize],
    test: &[usize],
    plan: &EpochPlan,
    epoch: u64,
    on_step: &mut dyn FnMut(&StepDone),
) -> Result<EpochMetrics> {
    check_classes(model, data)?;
    let lr = plan.schedule.rate(plan.base_lr, epoch);
    trainer.optimizer_mut().set_learning_rate(lr)?;
    let (train, train_time) = train_epoch(
        model,
        trainer,
        data,
        train,
        epoch,
        plan.seed,
        plan.batch_size,
        on_step,
    )?;
    let test = if test.is_empty() {
        None
    } else {
        Some(evaluate(model, data, test, plan.batch_size)?.0)
    };
    Ok(EpochMetrics {
        epoch,
        lr,
        train,
        train_time,
        test,
    })
}
