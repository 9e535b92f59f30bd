//! `memopt frames`: integrate a folder of raw recordings once into SpikingJelly's cached frame
//! layout (`frames_number_T_split_by_number/<class>/<name>.npz` with array `frames`), which
//! later runs of memopt (`--format frames`) or SpikingJelly read directly.

use super::dataset::DataArgs;
use crate::error::{CliError, Result};
use crate::out;
use memopt_data::npy::{NpyArray, NpyData};
use memopt_data::{EventFormat, Events, FrameSpec, aedat3, integrate, npz};
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
and test/ as in SpikingJelly's own cache.";

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
}

fn write_sample(path: &Path, frames: &memopt_data::Frames) -> Result<()> {
    let a = NpyArray {
        shape: frames.dims.to_vec(),
        data: NpyData::F64(frames.data.iter().map(|&v| f64::from(v)).collect()),
    };
    Ok(npz::write(path, &[("frames", &a)])?)
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
    let base = match &args.out {
        Some(o) => o.clone(),
        None => root
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let target = base.join(spec.folder_name());
    // (class folder name, sample file name, events)
    let mut jobs: Vec<(String, String, PathBuf)> = Vec::new();
    let labelled = format == EventFormat::Aedat3 && !sorted_files(root, "csv")?.is_empty();
    let mut written = 0usize;
    // SpikingJelly names a fixed-duration sample `{name}_{frames}.npz`
    let mut emit = |class: &str, stem: &str, ev: &Events, source: &Path| -> Result<()> {
        let frames =
            integrate(ev, spec, h, w).map_err(|e| CliError::Invalid(format!("{}: {e}", source.display())))?;
        let dir = target.join(class);
        std::fs::create_dir_all(&dir).map_err(|e| CliError::write(&dir, e))?;
        let name = match spec {
            FrameSpec::Number { .. } => format!("{stem}.npz"),
            FrameSpec::Duration { .. } => format!("{stem}_{}.npz", frames.dims[0]),
        };
        write_sample(&dir.join(name), &frames)?;
        written += 1;
        Ok(())
    };
    if labelled {
        for (split, recordings) in dvs128_recordings(root)? {
            for rec in recordings {
                let stem = rec
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let csv = rec.with_file_name(format!("{stem}_labels.csv"));
                if !csv.is_file() {
                    return Err(CliError::Invalid(format!(
                        "{}: no labels file {}",
                        rec.display(),
                        csv.display()
                    )));
                }
                let events = format.read(&rec)?;
                for s in aedat3::split_by_labels(&events, &csv, 11)? {
                    emit(
                        &format!("{split}{}", s.class),
                        &format!("{stem}_{}", s.index),
                        &s.events,
                        &rec,
                    )?;
                }
            }
        }
    } else {
        let mut classes: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(|e| CliError::read(root, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        classes.sort();
        for dir in classes {
            let class = dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            for f in sorted_files(&dir, format.extension())? {
                let stem = f
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                jobs.push((class.clone(), stem, f));
            }
        }
        if jobs.is_empty() {
            return Err(CliError::Invalid(format!(
                "{}: no .{} recordings in class subfolders",
                root.display(),
                format.extension()
            )));
        }
        for (class, name, path) in &jobs {
            let ev = format.read(path)?;
            emit(class, name, &ev, path)?;
        }
    }
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
