//! Options that point a command at an event-camera dataset (`--data`, `--format`, how frames
//! are integrated, resizing, the train/test split), shared by `train`, `eval` and `frames`.

use crate::error::{CliError, Result};
use memopt_checkpoint::InputSpec;
use memopt_data::{Dataset, EventFormat, FrameSpec, MemoryBudget, SampleSource, SplitBy};
use std::path::PathBuf;
use std::sync::Arc;

/// How `--split-by` divides a recording into a fixed number of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitByArg {
    /// Equal event counts.
    Number,
    /// Equal time spans.
    Time,
}

/// Which samples a command uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitArg {
    /// The training part of the split.
    Train,
    /// The test part of the split.
    Test,
    /// Every sample.
    All,
}

/// Where the data is and how to turn it into frames.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// Dataset folder with one subfolder per class: SpikingJelly's cached frames
    /// (`frames_number_T_split_by_number/`, `.npz` with `frames`) or raw recordings (see
    /// --format).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// What the class folders hold: frames (cached `.npz` frames), npz (SpikingJelly's
    /// `events_np` events), nmnist (ATIS `.bin`), cifar10dvs (AEDAT 2 `.aedat`), dvs128
    /// (AEDAT 3.1 `.aedat`). Events are integrated into frames as SpikingJelly does.
    #[arg(long, default_value = "frames", value_name = "FORMAT")]
    pub format: String,
    /// Frames per sample when integrating events [default: the model's T].
    #[arg(long, value_name = "T")]
    pub frames: Option<usize>,
    /// Divide each recording into frames of equal event counts or equal time spans.
    #[arg(long, value_enum, default_value_t = SplitByArg::Number)]
    pub split_by: SplitByArg,
    /// Integrate frames of this many microseconds instead of a fixed number of frames.
    #[arg(long, value_name = "US", conflicts_with = "frames")]
    pub duration: Option<i64>,
    /// Sensor size HxW of raw recordings [default: 34x34 for nmnist, 128x128 for cifar10dvs
    /// and dvs128; needed for npz events].
    #[arg(long, value_name = "HxW")]
    pub sensor: Option<String>,
    /// Resize frames to the model's input (antialiased bilinear, as torchvision's
    /// `transforms.Resize` in SpikingJelly's CIFAR10-DVS example) when sizes differ.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub resize: bool,
    /// Fraction of each class for training, the rest for testing (SpikingJelly's
    /// `split_to_train_test_set`: the first ceil(count * ratio) of each class).
    #[arg(long, default_value_t = 0.9, value_name = "R")]
    pub train_ratio: f64,
}

fn parse_hw(text: &str, what: &str) -> Result<(usize, usize)> {
    let parts: Vec<&str> = text.split('x').collect();
    match parts[..] {
        [h, w] => match (h.trim().parse::<usize>(), w.trim().parse::<usize>()) {
            (Ok(h), Ok(w)) if h > 0 && w > 0 => Ok((h, w)),
            _ => Err(CliError::Usage(format!(
                "{what} must be HxW with positive integers, e.g. 128x128, got '{text}'"
            ))),
        },
        _ => Err(CliError::Usage(format!(
            "{what} must be HxW, e.g. 128x128, got '{text}'"
        ))),
    }
}

impl DataArgs {
    /// The frame integration asked for (`frames` defaults to `time_steps`).
    pub fn frame_spec(&self, time_steps: usize) -> Result<FrameSpec> {
        if let Some(d) = self.duration {
            if d <= 0 {
                return Err(CliError::Usage(format!(
                    "--duration must be at least 1 µs, got {d}"
                )));
            }
            return Ok(FrameSpec::Duration { duration_us: d });
        }
        let frames = self.frames.unwrap_or(time_steps);
        if frames == 0 {
            return Err(CliError::Usage("--frames must be at least 1".into()));
        }
        let split_by = match self.split_by {
            SplitByArg::Number => SplitBy::Number,
            SplitByArg::Time => SplitBy::Time,
        };
        Ok(FrameSpec::Number { frames, split_by })
    }

    /// The event format of `--format`, or `None` for cached frames.
    pub fn event_format(&self) -> Result<Option<EventFormat>> {
        if self.format == "frames" {
            return Ok(None);
        }
        EventFormat::from_name(&self.format).map(Some).map_err(|_| {
            CliError::Usage(format!(
                "unknown --format '{}': expected frames, npz, nmnist, cifar10dvs or dvs128",
                self.format
            ))
        })
    }

    /// The sensor size of raw recordings.
    pub fn sensor(&self, format: EventFormat) -> Result<(usize, usize)> {
        match (&self.sensor, format.sensor_size()) {
            (Some(s), _) => parse_hw(s, "--sensor"),
            (None, Some(hw)) => Ok(hw),
            (None, None) => Err(CliError::Usage(
                "--sensor HxW is needed for npz events (e.g. 34x34 for N-MNIST)".into(),
            )),
        }
    }

    /// The dataset folder, or a usage error naming the command.
    pub fn folder(&self, command: &str) -> Result<&PathBuf> {
        self.data.as_ref().ok_or_else(|| {
            CliError::Usage(format!(
                "`memopt {command}` needs --data DIR (class subfolders of frames or recordings)"
            ))
        })
    }

    /// Opens the dataset for a model taking `spec`: frames integrated with T = the model's
    /// time steps (unless --frames/--duration say otherwise) and resized to its H x W. The
    /// loader's batches of `batch_size` samples must fit `budget` (checked before any sample is
    /// read); what remains is each sample's budget for reading, integrating and resizing.
    pub fn open(
        &self,
        command: &str,
        spec: &InputSpec,
        batch_size: usize,
        budget: &MemoryBudget,
    ) -> Result<Arc<Dataset>> {
        let root = self.folder(command)?;
        let source = match self.event_format()? {
            None => SampleSource::Frames,
            Some(format) => SampleSource::Events {
                format,
                spec: self.frame_spec(spec.time_steps)?,
                sensor: self.sensor(format)?,
            },
        };
        let mut data = Dataset::open(root, source)?;
        if self.resize && spec.sample.len() == 3 {
            data.resize = Some((spec.sample[1], spec.sample[2]));
        }
        let mut sample = [spec.time_steps, 1, 1, 1];
        for (d, &s) in sample[1..].iter_mut().zip(&spec.sample) {
            *d = s;
        }
        let batches = memopt_data::loader::loader_bytes(batch_size, sample)?;
        data.budget = budget.less(
            batches,
            &format!(
                "the loader's {} batches of {batch_size} samples of frames {sample:?}",
                memopt_data::loader::BATCHES_IN_FLIGHT
            ),
        )?;
        let first = data.frames(0)?;
        let [t, c, h, w] = first.dims;
        if t != spec.time_steps || spec.sample != [c, h, w] {
            return Err(CliError::Invalid(format!(
                "{} gives frames [T={t}, {c}, {h}, {w}] but the model takes [T={}, {}]: set --timesteps {t} \
                 and --input {c}x{}x{} (or --frames / --resize)",
                data.samples[0].0.display(),
                spec.time_steps,
                spec.sample
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.sample.get(1).copied().unwrap_or(h),
                spec.sample.get(2).copied().unwrap_or(w),
            )));
        }
        Ok(Arc::new(data))
    }

    /// Train and test indices of `data` (`--train-ratio`).
    pub fn split(&self, data: &Dataset) -> Result<(Vec<usize>, Vec<usize>)> {
        if !(0.0..=1.0).contains(&self.train_ratio) {
            return Err(CliError::Usage(format!(
                "--train-ratio must be in [0, 1], got {}",
                self.train_ratio
            )));
        }
        Ok(memopt_data::split_train_test(
            &data.labels(),
            data.classes.len(),
            self.train_ratio,
        )?)
    }
}
