//! `memopt frames`: integrate a folder of raw recordings once into SpikingJelly's cached frame
//! layout (`frames_number_T_split_by_number/<class>/<name>.npz` with array `frames`), which
//! later runs of memopt (`--format frames`) or SpikingJelly read directly.

use super::dataset::DataArgs;
use crate::error::{CliError, Result};
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use memopt_core::output_file;
use memopt_data::npy::{NpyArray, NpyData};
use memopt_data::{EventFormat, Events, FrameSpec, Frames, aedat3, frame_count, integrate_within, npz};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Long help of `memopt frames`.
pub const LONG_ABOUT: &str = "\
Integrate raw event recordings into frames exactly as SpikingJelly 2.0 does (two polarity
channels of event counts; a fixed number of frames split by event count or by time, or frames of
a fixed duration) and write them in SpikingJelly's cached layout: OUT/frames_number_T_split_by_number
(or OUT/duration_D) with one .npz per sample (array `frames`, float64 [T, 2, H, W]) under its class
folder. --data holds one subfolder per class; for DVS128 Gesture (--format dvs128) it may instead
hold the original recordings with their `*_labels.csv`, which are cut into samples by label; with
SpikingJelly's trials_to_train.txt and trials_to_test.txt there too, the samples go under train/
and test/ as in SpikingJelly's own cache.

The frame folder is written whole or not at all: samples go to a hidden folder beside it, renamed
into place when every one is written and removed when anything fails. An existing frame folder is
never mixed with new samples: remove it first or give --out another folder. Each sample's frames
are predicted from the spec and the recording before they are made and refused when they exceed
the memory limit (--memory-limit, else the probed room).";

/// Options of `memopt frames`.
#[derive(Debug, Clone, clap::Args)]
pub struct FramesArgs {
    /// The raw dataset and how to integrate it (--frames is required unless --duration).
    #[command(flatten)]
    pub data: DataArgs,
    /// Folder to write the frame folder into [default: the parent of --data, as SpikingJelly's
    /// root holds both events_np/ and frames_*/].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The memory limit each sample's integration keeps to.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
}

/// Bytes per frame value while a sample is written: the `f32` frames, their `float64` copy,
/// the `.npy` bytes and the deflated archive (at most about the `.npy` size).
const WRITE_BYTES_PER_VALUE: u64 = 4 + 8 + 8 + 8;

/// The frame folder being written: a hidden folder beside the target, renamed to the target
/// when every sample is written and removed when anything fails, so the target appears whole
/// or not at all.
struct StagedFolder {
    staging: PathBuf,
    target: PathBuf,
    /// Output files written so far, with the recording each came from.
    written: HashMap<PathBuf, PathBuf>,
    committed: bool,
}

impl StagedFolder {
    /// Refuses an existing target (an earlier run's samples would mix with this run's) and
    /// creates the hidden staging folder.
    fn create(base: &Path, folder: &str) -> Result<StagedFolder> {
        let target = base.join(folder);
        if std::fs::symlink_metadata(&target).is_ok() {
            return Err(CliError::Invalid(format!(
                "{} already exists (an earlier run's frames): remove it or give --out another folder; \
                 a frame folder is written whole, never mixed with older samples",
                target.display()
            )));
        }
        std::fs::create_dir_all(base).map_err(|e| CliError::write(base, e))?;
        let staging = base.join(format!(".{folder}.partial-{}", output_file::unique_suffix()));
        std::fs::create_dir(&staging).map_err(|e| CliError::write(&staging, e))?;
        Ok(StagedFolder {
            staging,
            target,
            written: HashMap::new(),
            committed: false,
        })
    }

    /// Writes one sample as `class/name` (a file name kept byte for byte, never converted); a
    /// second sample of the same name is an error naming both recordings.
    fn write(&mut self, class: &OsStr, name: &OsStr, frames: &Frames, source: &Path) -> Result<()> {
        let dir = self.staging.join(class);
        let path = dir.join(name);
        if let Some(first) = self.written.get(&path) {
            return Err(CliError::Invalid(format!(
                "{} and {} both give the sample {}; rename one of them",
                first.display(),
                source.display(),
                self.target.join(class).join(name).display()
            )));
        }
        std::fs::create_dir_all(&dir).map_err(|e| CliError::write(&dir, e))?;
        let a = NpyArray {
            shape: frames.dims.to_vec(),
            data: NpyData::F64(frames.data.iter().map(|&v| f64::from(v)).collect()),
        };
        // named as the file will be: the staging folder is gone when the error is read
        let named = self.target.join(class).join(name);
        npz::write(&path, &[("frames", &a)]).map_err(|e| match e {
            memopt_data::DataError::Io { source, .. } => CliError::write(&named, source),
            e => CliError::Invalid(format!("{}: {e}", named.display())),
        })?;
        self.written.insert(path, source.to_path_buf());
        Ok(())
    }

    /// Renames the staging folder to the target.
    fn commit(mut self) -> Result<usize> {
        if self.written.is_empty() {
            return Err(CliError::Invalid(
                "no sample was written: every recording or labels file gave none".into(),
            ));
        }
        std::fs::rename(&self.staging, &self.target).map_err(|e| CliError::write(&self.target, e))?;
        self.committed = true;
        Ok(self.written.len())
    }
}

impl Drop for StagedFolder {
    fn drop(&mut self) {
        if !self.committed {
            // best effort: the staging folder is ours and incomplete
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

fn sorted_files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| CliError::read(dir, e))? {
        let p = e.map_err(|e| CliError::read(dir, e))?.path();
        if p.is_file() && p.extension().is_some_and(|x| x == ext) {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// The DVS128 Gesture recordings of `root`, with the folder prefix of their split. With
/// SpikingJelly's `trials_to_train.txt` and `trials_to_test.txt` beside them, the recordings
/// each lists, under `train/` and `test/` as SpikingJelly writes its cache; without them, every
/// `.aedat` in `root`, under one tree.
fn dvs128_recordings(root: &Path) -> Result<Vec<(&'static str, Vec<PathBuf>)>> {
    let lists = [("train/", "trials_to_train.txt"), ("test/", "trials_to_test.txt")];
    let present: Vec<bool> = lists.iter().map(|(_, f)| root.join(f).is_file()).collect();
    match (present[0], present[1]) {
        (false, false) => return Ok(vec![("", sorted_files(root, "aedat")?)]),
        (true, true) => {}
        _ => {
            return Err(CliError::Invalid(format!(
                "{}: SpikingJelly's split needs both trials_to_train.txt and trials_to_test.txt \
                 (or neither, to integrate every recording into one tree)",
                root.display()
            )));
        }
    }
    let mut splits = Vec::new();
    for (prefix, list) in lists {
        let path = root.join(list);
        let text = crate::files::read_input(&path, "trials list")?;
        let recordings = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| root.join(l))
            .collect();
        splits.push((prefix, recordings));
    }
    Ok(splits)
}

/// One recording to integrate: its class folder, the stem of its sample names and its path.
struct Job {
    class: OsString,
    stem: OsString,
    path: PathBuf,
}

/// The recordings of a class-folder dataset, classes and files in sorted order.
fn class_folder_jobs(root: &Path, format: EventFormat) -> Result<Vec<Job>> {
    let mut classes: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(root).map_err(|e| CliError::read(root, e))? {
        let p = e.map_err(|e| CliError::read(root, e))?.path();
        if p.is_dir() {
            classes.push(p);
        }
    }
    classes.sort();
    let mut jobs = Vec::new();
    for dir in classes {
        let class = dir.file_name().map(OsStr::to_os_string).unwrap_or_default();
        for path in sorted_files(&dir, format.extension())? {
            let stem = path.file_stem().map(OsStr::to_os_string).unwrap_or_default();
            jobs.push(Job {
                class: class.clone(),
                stem,
                path,
            });
        }
    }
    if jobs.is_empty() {
        return Err(CliError::Invalid(format!(
            "{}: no .{} recordings in class subfolders",
            root.display(),
            format.extension()
        )));
    }
    Ok(jobs)
}

/// `stem` followed by `suffix`, byte for byte.
fn joined(stem: &OsStr, suffix: &str) -> OsString {
    let mut s = stem.to_os_string();
    s.push(suffix);
    s
}

/// Integrates and writes.
pub fn run(args: &FramesArgs, out: &mut dyn Write) -> Result<()> {
    let root = args.data.folder("frames")?;
    let format = args.data.event_format()?.ok_or_else(|| {
        CliError::Usage("--format must name the raw recordings: nmnist, cifar10dvs, dvs128 or npz".into())
    })?;
    if args.data.frames.is_none() && args.data.duration.is_none() {
        return Err(CliError::Usage(
            "give --frames T (a fixed number of frames) or --duration US".into(),
        ));
    }
    let spec = args.data.frame_spec(0)?;
    let (h, w) = args.data.sensor(format)?;
    let budget = args.limit.data_budget()?;
    let base = match &args.out {
        Some(o) => o.clone(),
        // the parent of the folder itself, also for `--data .`
        None => std::fs::canonicalize(root)
            .map_err(|e| CliError::read(root, e))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/")),
    };
    if crate::files::lies_under(&base, root) {
        return Err(CliError::Usage(format!(
            "--out {} lies inside --data {}: the frame folder would become one of its classes; write it \
             beside the recordings (the default) or elsewhere",
            base.display(),
            root.display()
        )));
    }
    let labelled = format == EventFormat::Aedat3 && !sorted_files(root, "csv")?.is_empty();
    // The recordings are listed (and the DVS128 lists read) before the folder is staged.
    let dvs128 = if labelled {
        dvs128_recordings(root)?
    } else {
        Vec::new()
    };
    let jobs = if labelled {
        Vec::new()
    } else {
        class_folder_jobs(root, format)?
    };
    let mut folder = StagedFolder::create(&base, &spec.folder_name())?;
    // SpikingJelly names a fixed-duration sample `{name}_{frames}.npz`
    let mut emit = |class: &OsStr, stem: &OsStr, ev: &Events, source: &Path| -> Result<()> {
        let in_file = |e: memopt_data::DataError| CliError::Invalid(format!("{}: {e}", source.display()));
        let sample_budget = budget
            .less(ev.bytes(), "the recording's events")
            .map_err(in_file)?;
        // The frames, their float64 copy and the archive, predicted before integrating.
        if !ev.is_empty() {
            let count = frame_count(&ev.t, spec).map_err(in_file)?;
            let writing = [count as u64, 2, h as u64, w as u64, WRITE_BYTES_PER_VALUE]
                .iter()
                .fold(1u64, |a, &d| a.saturating_mul(d));
            sample_budget
                .check(writing, || {
                    format!("writing frames [{count}, 2, {h}, {w}] as float64 .npz")
                })
                .map_err(in_file)?;
        }
        let frames = integrate_within(ev, spec, h, w, &sample_budget).map_err(in_file)?;
        let name = match spec {
            FrameSpec::Number { .. } => joined(stem, ".npz"),
            FrameSpec::Duration { .. } => joined(stem, &format!("_{}.npz", frames.dims[0])),
        };
        folder.write(class, &name, &frames, source)
    };
    for (split, recordings) in dvs128 {
        for rec in recordings {
            let stem = rec.file_stem().map(OsStr::to_os_string).unwrap_or_default();
            let csv = rec.with_file_name(joined(&stem, "_labels.csv"));
            if !csv.is_file() {
                return Err(CliError::Invalid(format!(
                    "{}: no labels file {}",
                    rec.display(),
                    csv.display()
                )));
            }
            let events = format.read_within(&rec, &budget)?;
            for s in aedat3::split_by_labels(&events, &csv, 11)? {
                emit(
                    OsStr::new(&format!("{split}{}", s.class)),
                    &joined(&stem, &format!("_{}", s.index)),
                    &s.events,
                    &rec,
                )?;
            }
        }
    }
    for job in &jobs {
        let ev = format.read_within(&job.path, &budget)?;
        emit(&job.class, &job.stem, &ev, &job.path)?;
    }
    let target = folder.target.clone();
    let written = folder.commit()?;
    let what = match spec {
        FrameSpec::Number { frames, .. } => format!("{frames} frames each"),
        FrameSpec::Duration { duration_us } => format!("frames of {duration_us} µs"),
    };
    out!(
        out,
        "wrote {written} samples ({what}, {h}x{w}) to {}",
        target.display()
    )
}
