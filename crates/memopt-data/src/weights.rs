//! Weights in safetensors with the names PyTorch's `state_dict()` gives the same SpikingJelly
//! model (`features.0.proj_bn.0.weight`, `layer1.0.bn1.running_mean`, ...): parameters,
//! buffers (BatchNorm running statistics and `num_batches_tracked`) and, for resuming, the
//! optimizer's per-parameter state (`optimizer.<param>.momentum_buffer`, `.exp_avg`,
//! `.exp_avg_sq`) with the step counters and random stream in the file's metadata.
//!
//! Loading checks every name, shape and dtype first and changes nothing unless all match, so a
//! file of another architecture is an error listing the first mismatches and the model is
//! never half-loaded.

use crate::error::{DataError, Result, read_all};
use memopt_checkpoint::{Model, Trainer};
use memopt_core::{RngState, Tensor};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Prefix of optimizer state entries.
const OPTIMIZER: &str = "optimizer.";
/// Mismatches listed in an error before "and N more".
const SHOWN: usize = 8;

/// Scalars stored with the tensors (in the safetensors metadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WeightsInfo {
    /// Model name the file was saved from.
    pub model: String,
    /// Training steps behind these weights (written as every BatchNorm's `num_batches_tracked`).
    pub steps: u64,
    /// Further entries (epoch, learning rate, ...), free-form text.
    pub extra: BTreeMap<String, String>,
}

/// The training state saved with [`save_training`] and restored by [`load_training`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainerState {
    /// Trainer steps.
    pub steps: u64,
    /// The trainer's random stream (dropout masks).
    pub rng: RngState,
    /// Optimizer name (`sgd`, `adam`).
    pub optimizer: String,
    /// Optimizer update count.
    pub optimizer_steps: u64,
}

/// An entry to write: name and f32 or i64 data with its shape.
enum Entry {
    F32(Vec<usize>, Vec<u8>),
    I64(Vec<usize>, Vec<u8>),
}

fn f32_bytes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(t.to_vec_f32()?.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// BatchNorm modules: paths holding a `running_mean` buffer.
fn batch_norm_paths(model: &Model) -> Vec<String> {
    model
        .buffers()
        .iter()
        .filter_map(|(n, _)| n.strip_suffix(".running_mean").map(str::to_string))
        .collect()
}

fn model_entries(model: &Model, steps: u64) -> Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    for (name, p) in model.params() {
        out.insert(
            name,
            Entry::F32(p.tensor().dims().to_vec(), f32_bytes(p.tensor())?),
        );
    }
    for (name, b) in model.buffers() {
        out.insert(
            name,
            Entry::F32(b.tensor().dims().to_vec(), f32_bytes(b.tensor())?),
        );
    }
    let tracked = i64::try_from(steps).unwrap_or(i64::MAX).to_le_bytes().to_vec();
    for bn in batch_norm_paths(model) {
        out.insert(
            format!("{bn}.num_batches_tracked"),
            Entry::I64(Vec::new(), tracked.clone()),
        );
    }
    Ok(out)
}

fn optimizer_entries(model: &Model, trainer: &Trainer) -> Result<BTreeMap<String, Entry>> {
    let names: HashMap<_, _> = model.params().into_iter().map(|(n, p)| (p.id(), n)).collect();
    let mut out = BTreeMap::new();
    for s in trainer.optimizer().state_tensors() {
        let Some(param) = names.get(&s.param) else {
            continue;
        };
        out.insert(
            format!("{OPTIMIZER}{param}.{}", s.name),
            Entry::F32(s.tensor.dims().to_vec(), f32_bytes(&s.tensor)?),
        );
    }
    Ok(out)
}

fn write_file(path: &Path, entries: &BTreeMap<String, Entry>, meta: HashMap<String, String>) -> Result<()> {
    crate::write_replacing(path, &serialize(path, entries, meta)?)
}

fn serialize(
    path: &Path,
    entries: &BTreeMap<String, Entry>,
    meta: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut views = Vec::with_capacity(entries.len());
    for (name, e) in entries {
        let (dtype, shape, data) = match e {
            Entry::F32(s, d) => (Dtype::F32, s.clone(), d.as_slice()),
            Entry::I64(s, d) => (Dtype::I64, s.clone(), d.as_slice()),
        };
        let view = TensorView::new(dtype, shape, data)
            .map_err(|e| DataError::file(path, format!("tensor '{name}': {e}")))?;
        views.push((name.clone(), view));
    }
    safetensors::serialize(views, Some(meta))
        .map_err(|e| DataError::file(path, format!("serialising safetensors: {e}")))
}

fn base_meta(model: &Model, info: &WeightsInfo) -> HashMap<String, String> {
    let mut meta: HashMap<String, String> = info.extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    meta.insert("format".into(), "pt".into());
    meta.insert("memopt.model".into(), model.name().to_string());
    meta.insert("memopt.steps".into(), info.steps.to_string());
    meta
}

/// Saves `model`'s parameters and buffers to `path` (replaced only when the whole file is
/// written), loadable by `model.load_state_dict(safetensors.torch.load_file(path))`.
pub fn save_model(path: &Path, model: &Model, info: &WeightsInfo) -> Result<()> {
    let entries = model_entries(model, info.steps)?;
    write_file(path, &entries, base_meta(model, info))
}

/// Saves parameters, buffers, the optimizer's state and the trainer's counters and random
/// stream: [`load_training`] then continues bit-identically.
pub fn save_training(path: &Path, model: &Model, trainer: &Trainer, info: &WeightsInfo) -> Result<()> {
    write_file(
        path,
        &training_entries(model, trainer, info)?,
        training_meta(model, trainer, info),
    )
}

/// The training-state file saved beside weights `weights` by [`save_pair`]:
/// `STEM.state.safetensors` in the same folder.
pub fn state_path(weights: &Path) -> PathBuf {
    let stem = weights
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    weights.with_file_name(format!("{stem}.state.safetensors"))
}

/// Metadata key tying a state file to the weights saved with it.
const SAVE_ID: &str = "memopt.save_id";
/// Metadata key of a state file naming its weights file (in the same folder).
const PAIRED_WEIGHTS: &str = "memopt.paired_weights";

/// Saves the weights to `weights` and the training state to [`state_path`]`(weights)` as one
/// pair: both files are written in full to temporary files first (a failure leaves both old
/// files), then the weights are renamed into place and the state last. Both carry one save
/// id, so an interruption between the two renames leaves weights newer than the state, which
/// [`load_training`] refuses to pair.
pub fn save_pair(weights: &Path, model: &Model, trainer: &Trainer, info: &WeightsInfo) -> Result<()> {
    let state = state_path(weights);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let id = format!("{}-{nanos}-{}", info.steps, std::process::id());
    let mut weights_meta = base_meta(model, info);
    weights_meta.insert(SAVE_ID.into(), id.clone());
    let mut state_meta = training_meta(model, trainer, info);
    state_meta.insert(SAVE_ID.into(), id);
    if let Some(name) = weights.file_name() {
        state_meta.insert(PAIRED_WEIGHTS.into(), name.to_string_lossy().into_owned());
    }
    let weights_bytes = serialize(weights, &model_entries(model, info.steps)?, weights_meta)?;
    let state_bytes = serialize(&state, &training_entries(model, trainer, info)?, state_meta)?;
    memopt_core::output_file::write_together(&[(weights, &weights_bytes), (&state, &state_bytes)])
        .map_err(|(path, e)| DataError::io(path, e))
}

fn training_entries(model: &Model, trainer: &Trainer, info: &WeightsInfo) -> Result<BTreeMap<String, Entry>> {
    let mut entries = model_entries(model, info.steps)?;
    entries.extend(optimizer_entries(model, trainer)?);
    Ok(entries)
}

fn training_meta(model: &Model, trainer: &Trainer, info: &WeightsInfo) -> HashMap<String, String> {
    let mut meta = base_meta(model, info);
    let rng = trainer.rng_state();
    meta.insert("memopt.trainer.steps".into(), trainer.steps().to_string());
    meta.insert("memopt.trainer.rng_seed".into(), rng.seed.to_string());
    meta.insert("memopt.trainer.rng_offset".into(), rng.offset.to_string());
    meta.insert("memopt.optimizer".into(), trainer.optimizer().name().to_string());
    meta.insert(
        "memopt.optimizer.steps".into(),
        trainer.optimizer().step_count().to_string(),
    );
    meta.insert(
        "memopt.optimizer.lr".into(),
        trainer.optimizer().learning_rate().to_string(),
    );
    meta
}

/// A read safetensors file.
struct Loaded {
    bytes: Vec<u8>,
}

impl Loaded {
    fn open(path: &Path) -> Result<Loaded> {
        let bytes = read_all(path)?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| DataError::file(path, format!("not a safetensors file: {e}")))?;
        Ok(Loaded { bytes })
    }

    fn tensors(&self) -> SafeTensors<'_> {
        // deserialize succeeded on these very bytes in `open`
        SafeTensors::deserialize(&self.bytes).expect("validated in Loaded::open")
    }

    fn meta(&self) -> HashMap<String, String> {
        SafeTensors::read_metadata(&self.bytes)
            .ok()
            .and_then(|(_, m)| m.metadata().clone())
            .unwrap_or_default()
    }
}

/// What the model (and optionally optimizer) expects: name -> (tensor, dtype).
fn expected(
    model: &Model,
    trainer: Option<&Trainer>,
) -> BTreeMap<String, (Option<Tensor>, Dtype, Vec<usize>)> {
    let mut out = BTreeMap::new();
    for (n, p) in model.params() {
        out.insert(
            n,
            (Some(p.tensor().clone()), Dtype::F32, p.tensor().dims().to_vec()),
        );
    }
    for (n, b) in model.buffers() {
        out.insert(
            n,
            (Some(b.tensor().clone()), Dtype::F32, b.tensor().dims().to_vec()),
        );
    }
    for bn in batch_norm_paths(model) {
        out.insert(
            format!("{bn}.num_batches_tracked"),
            (None, Dtype::I64, Vec::new()),
        );
    }
    if let Some(tr) = trainer {
        let names: HashMap<_, _> = model.params().into_iter().map(|(n, p)| (p.id(), n)).collect();
        for s in tr.optimizer().state_tensors() {
            if let Some(param) = names.get(&s.param) {
                let dims = s.tensor.dims().to_vec();
                out.insert(
                    format!("{OPTIMIZER}{param}.{}", s.name),
                    (Some(s.tensor), Dtype::F32, dims),
                );
            }
        }
    }
    out
}

/// Checks every name, dtype and shape, then copies the data; returns the file's metadata.
fn load_into(path: &Path, model: &Model, trainer: Option<&Trainer>) -> Result<HashMap<String, String>> {
    if model.device().is_meta() {
        return Err(DataError::Invalid(format!(
            "weights load into a model with values (cpu or cuda); this one is on {}, which has none",
            model.device()
        )));
    }
    let file = Loaded::open(path)?;
    let st = file.tensors();
    let want = expected(model, trainer);
    let mut problems = Vec::new();
    for (name, (_, dtype, dims)) in &want {
        match st.tensor(name) {
            Err(_) => problems.push(format!("missing {name} {dims:?}")),
            Ok(v) if v.dtype() != *dtype || v.shape() != dims.as_slice() => problems.push(format!(
                "{name}: file has {:?} {:?}, model needs {dtype:?} {dims:?}",
                v.dtype(),
                v.shape()
            )),
            Ok(_) => {}
        }
    }
    let mut names: Vec<&str> = st.names();
    names.sort_unstable();
    for name in names {
        let optimizer_entry = name.starts_with(OPTIMIZER) && trainer.is_none();
        if !want.contains_key(name) && !optimizer_entry {
            let shape = st.tensor(name).map(|v| v.shape().to_vec()).unwrap_or_default();
            problems.push(format!("unexpected {name} {shape:?}"));
        }
    }
    if !problems.is_empty() {
        let more = problems.len().saturating_sub(SHOWN);
        let mut msg = format!(
            "does not fit model '{}' ({} mismatches, nothing loaded):\n  {}",
            model.name(),
            problems.len(),
            problems[..problems.len().min(SHOWN)].join("\n  ")
        );
        if more > 0 {
            msg.push_str(&format!("\n  ... and {more} more"));
        }
        return Err(DataError::file(path, msg));
    }
    let bad = non_finite(&st, &want);
    if !bad.is_empty() {
        let more = if bad.len() > 3 {
            format!("; and {} more tensors", bad.len() - 3)
        } else {
            String::new()
        };
        return Err(DataError::file(
            path,
            format!(
                "weights must be finite, nothing loaded: {}{more}",
                bad[..bad.len().min(3)].join("; ")
            ),
        ));
    }
    for (name, (tensor, _, _)) in &want {
        let Some(t) = tensor else { continue };
        // present with the right dtype and shape: checked above
        let view = st.tensor(name).expect("checked above");
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // In place on the model's device (a GPU copy allocates nothing there).
        t.copy_from_host(&values)?;
    }
    drop(st);
    Ok(file.meta())
}

/// `name holds NaN at index i` for every loaded `f32` tensor holding a NaN or an infinity.
fn non_finite(
    st: &SafeTensors<'_>,
    want: &BTreeMap<String, (Option<Tensor>, Dtype, Vec<usize>)>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, (tensor, _, _)) in want {
        let Ok(view) = st.tensor(name) else { continue };
        if tensor.is_none() {
            continue;
        }
        let bad = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .enumerate()
            .find(|(_, v)| !v.is_finite());
        if let Some((i, v)) = bad {
            out.push(format!("{name} holds {v} at index {i}"));
        }
    }
    out
}

/// A whole number in the metadata under `key`: `None` when absent, an error naming the file
/// and the key when it is not one.
pub fn meta_number(path: &Path, meta: &HashMap<String, String>, key: &str) -> Result<Option<u64>> {
    meta.get(key)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                DataError::file(
                    path,
                    format!("metadata '{key}' is '{v}', not a whole number: the file is damaged"),
                )
            })
        })
        .transpose()
}

fn info_from(path: &Path, meta: &HashMap<String, String>) -> Result<WeightsInfo> {
    Ok(WeightsInfo {
        model: meta.get("memopt.model").cloned().unwrap_or_default(),
        steps: meta_number(path, meta, "memopt.steps")?.unwrap_or(0),
        extra: meta
            .iter()
            .filter(|(k, _)| !k.starts_with("memopt.") && k.as_str() != "format")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

/// Loads parameters and buffers into `model` (optimizer entries in the file are ignored). On
/// any mismatch nothing changes.
pub fn load_model(path: &Path, model: &Model) -> Result<WeightsInfo> {
    let meta = load_into(path, model, None)?;
    info_from(path, &meta)
}

/// Loads parameters, buffers and optimizer state saved by [`save_training`] and puts the
/// trainer where the saved run stopped. On any mismatch nothing changes.
pub fn load_training(path: &Path, model: &Model, trainer: &mut Trainer) -> Result<WeightsInfo> {
    let file = Loaded::open(path)?;
    let meta = file.meta();
    let num = |k: &str| -> Result<u64> {
        meta_number(path, &meta, k)?.ok_or_else(|| {
            DataError::file(
                path,
                format!("no training state ('{k}' missing): it holds weights only; load it with --load, not --resume"),
            )
        })
    };
    let state = TrainerState {
        steps: num("memopt.trainer.steps")?,
        rng: RngState {
            seed: num("memopt.trainer.rng_seed")?,
            offset: num("memopt.trainer.rng_offset")?,
        },
        optimizer: meta.get("memopt.optimizer").cloned().unwrap_or_default(),
        optimizer_steps: num("memopt.optimizer.steps")?,
    };
    if state.optimizer != trainer.optimizer().name() {
        return Err(DataError::file(
            path,
            format!(
                "saved with optimizer '{}', but this run uses '{}'; resume with the same optimizer",
                state.optimizer,
                trainer.optimizer().name()
            ),
        ));
    }
    check_pair(path, &meta)?;
    let info = info_from(path, &meta)?;
    drop(file);
    load_into(path, model, Some(trainer))?;
    trainer.restore(state.steps, state.rng);
    trainer.optimizer_mut().set_step_count(state.optimizer_steps);
    Ok(info)
}

/// Refuses a state file whose weights file (saved with it by [`save_pair`]) carries another
/// save id: a save was interrupted between its two renames, and the weights are newer than
/// the state.
fn check_pair(state: &Path, meta: &HashMap<String, String>) -> Result<()> {
    let (Some(id), Some(name)) = (meta.get(SAVE_ID), meta.get(PAIRED_WEIGHTS)) else {
        return Ok(());
    };
    // A file name beside the state, never a path elsewhere.
    if Path::new(name).file_name() != Some(std::ffi::OsStr::new(name)) {
        return Err(DataError::file(
            state,
            format!("metadata '{PAIRED_WEIGHTS}' is '{name}', not a file name: the file is damaged"),
        ));
    }
    let weights = state.with_file_name(name);
    if !weights.exists() {
        return Ok(());
    }
    let theirs = Loaded::open(&weights)?.meta();
    match theirs.get(SAVE_ID) {
        // weights saved on their own (or from elsewhere) are not part of a pair
        None => return Ok(()),
        Some(other) if other == id => return Ok(()),
        Some(_) => {}
    }
    let steps = |m: &HashMap<String, String>| m.get("memopt.steps").cloned().unwrap_or_else(|| "?".into());
    Err(DataError::file(
        state,
        format!(
            "is not the pair of {} beside it: the weights were saved after step {}, this state after step \
             {} (a save was interrupted between the two files, or the weights come from another save). The state holds the weights too: remove or \
             rename {} and resume again (training is deterministic, so the lost epoch is retrained exactly)",
            weights.display(),
            steps(&theirs),
            steps(meta),
            weights.display()
        ),
    ))
}
