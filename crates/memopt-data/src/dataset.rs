//! A dataset folder as SpikingJelly (torchvision's `DatasetFolder`) lays it out: one
//! subfolder per class, classes in sorted order, files sorted within each class. Samples are
//! either cached frames (`.npz` with array `frames`, as in `frames_number_*_split_by_*`) or
//! event recordings integrated on the fly.

use crate::budget::MemoryBudget;
use crate::error::{DataError, Result};
use crate::event_format::EventFormat;
use crate::frames::{FrameSpec, Frames, integrate_within};
use crate::npz;
use crate::resize::resize_within;
use std::path::{Path, PathBuf};

/// What the files of a dataset hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleSource {
    /// `.npz` files with an array `frames` `[T, 2, H, W]`.
    Frames,
    /// Event recordings of `format`, integrated with `spec` on a `sensor` (H, W).
    Events {
        /// File format.
        format: EventFormat,
        /// How to integrate frames.
        spec: FrameSpec,
        /// Sensor size (H, W).
        sensor: (usize, usize),
    },
}

/// A labelled folder of samples.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Class names (subfolder names), sorted; a sample's label is an index into this.
    pub classes: Vec<String>,
    /// Every sample: file and label.
    pub samples: Vec<(PathBuf, usize)>,
    /// What the files hold.
    pub source: SampleSource,
    /// Resize frames to this (H, W) with antialiased bilinear interpolation, if set.
    pub resize: Option<(usize, usize)>,
    /// The memory one sample's reading, integration and resizing may hold at once; a sample
    /// that would need more is refused before it is allocated.
    pub budget: MemoryBudget,
}

fn sorted_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        out.push(e.map_err(|e| DataError::io(dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

impl Dataset {
    /// Lists `root/<class>/*.<ext>` (`ext` from the source: `npz` for frames).
    pub fn open(root: &Path, source: SampleSource) -> Result<Dataset> {
        let ext = match source {
            SampleSource::Frames => "npz",
            SampleSource::Events { format, .. } => format.extension(),
        };
        let mut classes = Vec::new();
        let mut samples = Vec::new();
        for dir in sorted_dir(root)?.into_iter().filter(|p| p.is_dir()) {
            let label = classes.len();
            classes.push(
                dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
            for f in sorted_dir(&dir)? {
                if f.is_file() && f.extension().is_some_and(|e| e == ext) {
                    samples.push((f, label));
                }
            }
        }
        if samples.is_empty() {
            return Err(DataError::file(
                root,
                format!(
                    "no samples: expected class subfolders holding .{ext} files ({} class folders found)",
                    classes.len()
                ),
            ));
        }
        Ok(Dataset {
            classes,
            samples,
            source,
            resize: None,
            budget: MemoryBudget::unlimited(),
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Labels of every sample, in order.
    pub fn labels(&self) -> Vec<usize> {
        self.samples.iter().map(|(_, l)| *l).collect()
    }

    /// Frames of sample `i` (integrated and resized as configured), within [`Dataset::budget`].
    pub fn frames(&self, i: usize) -> Result<Frames> {
        let (path, _) = self
            .samples
            .get(i)
            .ok_or_else(|| DataError::Invalid(format!("sample {i} of {}", self.samples.len())))?;
        self.sample_frames(path).map_err(|e| match e {
            // errors that do not name a file get this sample's
            e @ (DataError::Memory { .. } | DataError::Invalid(_) | DataError::Core(_)) => {
                DataError::file(path, e.to_string())
            }
            e => e,
        })
    }

    /// Frames of the sample in `path` (see [`Dataset::frames`]).
    fn sample_frames(&self, path: &Path) -> Result<Frames> {
        let frames = match self.source {
            SampleSource::Frames => read_frames_within(path, &self.budget)?,
            SampleSource::Events { format, spec, sensor } => {
                let ev = format.read_within(path, &self.budget)?;
                let budget = self.budget.less(ev.bytes(), "the recording's events")?;
                integrate_within(&ev, spec, sensor.0, sensor.1, &budget)?
            }
        };
        match self.resize {
            Some((h, w)) if (h, w) != (frames.dims[2], frames.dims[3]) => {
                let budget = self.budget.less(frames.bytes(), "the sample's frames")?;
                resize_within(&frames, h, w, &budget)
            }
            _ => Ok(frames),
        }
    }
}

/// Reads a cached frames file: array `frames` of shape `[T, C, H, W]`, every dimension at
/// least 1 and every value finite (a NaN or infinite value is an error naming its index).
pub fn read_frames(path: &Path) -> Result<Frames> {
    read_frames_within(path, &MemoryBudget::unlimited())
}

/// [`read_frames`] within `budget` (the archive entry, the parsed array and the `f32` frames).
pub fn read_frames_within(path: &Path, budget: &MemoryBudget) -> Result<Frames> {
    let a = npz::read_array_within(path, "frames", budget)?;
    let [t, c, h, w] = a.shape[..] else {
        return Err(DataError::file(
            path,
            format!("frames must be [T, C, H, W], got {:?}", a.shape),
        ));
    };
    if a.shape.contains(&0) {
        return Err(DataError::file(
            path,
            format!(
                "frames {:?} have a dimension of 0: a sample needs at least one value",
                a.shape
            ),
        ));
    }
    let data = a.to_f32_within(&budget.less(a.bytes(), "the parsed array")?)?;
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        let plane = h * w;
        return Err(DataError::file(
            path,
            format!(
                "frames hold {} at [{}, {}, {}, {}] (value {i}); frames must be finite",
                data[i],
                i / (c * plane),
                i / plane % c,
                i / w % h,
                i % w
            ),
        ));
    }
    Ok(Frames {
        dims: [t, c, h, w],
        data,
    })
}

/// SpikingJelly's `split_to_train_test_set(train_ratio, dataset, num_classes,
/// random_split=False)`: per class, the first `ceil(count * ratio)` samples go to training and
/// the rest to testing; indices class by class.
pub fn split_train_test(
    labels: &[usize],
    classes: usize,
    train_ratio: f64,
) -> Result<(Vec<usize>, Vec<usize>)> {
    if !(0.0..=1.0).contains(&train_ratio) {
        return Err(DataError::Invalid(format!(
            "train ratio must be in [0, 1], got {train_ratio}"
        )));
    }
    let mut per_class = vec![Vec::new(); classes];
    for (i, &l) in labels.iter().enumerate() {
        per_class
            .get_mut(l)
            .ok_or_else(|| DataError::Invalid(format!("label {l} of sample {i} is outside 0..{classes}")))?
            .push(i);
    }
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for idx in per_class {
        let pos = ((idx.len() as f64) * train_ratio).ceil() as usize;
        train.extend_from_slice(&idx[..pos.min(idx.len())]);
        test.extend_from_slice(&idx[pos.min(idx.len())..]);
    }
    Ok((train, test))
}
