//! The data commands (`frames`, `train --data`, `eval`) against hostile input, one test per
//! class at its mechanism: frame memory predicted against an injected memory limit, frame
//! folders made whole or not at all, outputs checked before any work (same file, links, inputs,
//! unwritable folders, devices), and no silent garbage (non-finite frames and weights, damaged
//! state files).

use memopt_data::{Events, atis_bin};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::{fails, ok, s};

/// Runs `memopt` with `args` and `env`.
fn memopt_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memopt"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the memopt binary runs")
}

/// Writes `dir/<class>/<name>.bin` N-MNIST recordings of `events` events each.
fn recording(dir: &Path, class: &str, name: &str, ts: &[i64]) {
    let d = dir.join(class);
    std::fs::create_dir_all(&d).unwrap();
    let mut ev = Events::default();
    for (i, &t) in ts.iter().enumerate() {
        ev.push(t, (i * 7 % 34) as u32, (i * 5 % 34) as u32, (i % 2) as u8);
    }
    std::fs::write(d.join(format!("{name}.bin")), atis_bin::to_bytes(&ev).unwrap()).unwrap();
}

/// A small two-class raw dataset of `per_class` recordings each.
fn raw_dataset(root: &Path, per_class: usize) -> PathBuf {
    let raw = root.join("raw");
    for class in ["0", "1"] {
        for i in 0..per_class {
            let ts: Vec<i64> = (0..64).map(|e| e * 40 + i as i64).collect();
            recording(&raw, class, &i.to_string(), &ts);
        }
    }
    raw
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn frame_memory_is_predicted_against_the_memory_limit_and_leaves_no_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    // Two events 8.4 s apart: 1 µs frames would be 8.4 million frames, 77.6 GB.
    recording(&raw, "0", "far", &[0, 8_388_607]);
    let limit = [("MEMOPT_MEMORY_LIMIT", "256MiB")];
    // A recording larger than the limit is refused before it is read.
    let big = tmp.path().join("big");
    recording(&big, "0", "long", &(0..4096).collect::<Vec<_>>());
    let o = memopt_env(
        &["frames", "--data", s(&big), "--format", "nmnist", "--frames", "2"],
        &[("MEMOPT_MEMORY_LIMIT", "16KiB")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("reading") && err.contains("long.bin"),
        "{err}"
    );
    std::fs::remove_dir_all(&big).unwrap();
    for extra in [
        &["--duration", "1"][..],
        &["--frames", "1000000000"],
        &["--frames", "2", "--sensor", "100000x100000"],
    ] {
        let mut args = vec!["frames", "--data", s(&raw), "--format", "nmnist"];
        args.extend_from_slice(extra);
        let o = memopt_env(&args, &limit);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("would take")
                && err.contains("MEMOPT_MEMORY_LIMIT 256MiB")
                && err.contains("far.bin"),
            "{extra:?}: {err}"
        );
        assert_eq!(names(tmp.path()), ["raw"], "no frame folder, whole or partial");
    }
}

#[test]
fn a_frame_folder_is_made_whole_or_not_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = raw_dataset(tmp.path(), 2);
    // The last recording is cut inside an event: the run fails after writing three samples.
    let bad = raw.join("1/1.bin");
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() - 2]).unwrap();
    let args = ["frames", "--data", s(&raw), "--format", "nmnist", "--frames", "2"];
    let e = fails(&args, 1);
    assert!(e.contains("1.bin") && e.contains("truncated"), "{e}");
    assert_eq!(names(tmp.path()), ["raw"], "no frame folder, whole or partial");
    std::fs::write(&bad, &bytes).unwrap();
    let text = ok(&args);
    assert!(text.contains("wrote 4 samples"), "{text}");
    // A second run never mixes its samples into the first run's folder.
    let e = fails(&args, 1);
    assert!(e.contains("already exists"), "{e}");
    assert_eq!(names(tmp.path()), ["frames_number_2_split_by_number", "raw"]);
    // Written inside the recordings, the frame folder would become one of their classes.
    for out in [raw.clone(), raw.join("new/frames")] {
        let e = fails(&[args.as_slice(), &["--out", s(&out)]].concat(), 2);
        assert!(e.contains("lies inside --data"), "{e}");
    }
    // Run from inside the recordings, the default folder is still beside them.
    std::fs::remove_dir_all(tmp.path().join("frames_number_2_split_by_number")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(["frames", "--data", ".", "--format", "nmnist", "--frames", "2"])
        .current_dir(&raw)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(names(&raw), ["0", "1"]);
    assert_eq!(names(tmp.path()), ["frames_number_2_split_by_number", "raw"]);
}

#[test]
fn names_that_are_not_utf8_are_kept_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let ts: Vec<i64> = (0..16).collect();
    for class in [&b"c\xff"[..], b"c\xfe"] {
        let class = std::ffi::OsStr::from_bytes(class);
        let d = raw.join(class);
        std::fs::create_dir_all(&d).unwrap();
        let mut ev = Events::default();
        for &t in &ts {
            ev.push(t, 1, 1, 0);
        }
        let name = std::ffi::OsStr::from_bytes(b"s\xff.bin");
        std::fs::write(d.join(name), atis_bin::to_bytes(&ev).unwrap()).unwrap();
    }
    let text = ok(&["frames", "--data", s(&raw), "--format", "nmnist", "--frames", "2"]);
    assert!(text.contains("wrote 2 samples"), "{text}");
    let out = tmp.path().join("frames_number_2_split_by_number");
    for class in [&b"c\xff"[..], b"c\xfe"] {
        let f = out
            .join(std::ffi::OsStr::from_bytes(class))
            .join(std::ffi::OsStr::from_bytes(b"s\xff.npz"));
        assert!(f.is_file(), "{}", f.display());
    }
}

const MODEL: &str = r#"{
  "name": "tiny",
  "input": { "time_steps": 2, "sample": [2, 16, 16], "classes": 2 },
  "layers": [
    { "type": "conv2d", "out": 2, "kernel": 3, "padding": 1 },
    { "type": "lif" },
    { "type": "max_pool", "kernel": 4 },
    { "type": "flatten" },
    { "type": "linear", "out": 2 }
  ]
}"#;

/// A frames dataset and a model file in a temporary folder, and the commands run on them.
struct Fixture {
    tmp: tempfile::TempDir,
    frames: PathBuf,
    model: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let raw = raw_dataset(tmp.path(), 2);
        ok(&["frames", "--data", s(&raw), "--format", "nmnist", "--frames", "2"]);
        let model = tmp.path().join("tiny.json");
        std::fs::write(&model, MODEL).unwrap();
        let frames = tmp.path().join("frames_number_2_split_by_number");
        Fixture { tmp, frames, model }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// `memopt CMD -m MODEL --data FRAMES` (`train` quietly with batch 2) and `extra`.
    fn args<'a>(&'a self, cmd: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![cmd, "-m", s(&self.model), "--data", s(&self.frames)];
        if cmd == "train" {
            a.extend(["-n", "2", "--quiet"]);
        }
        a.extend_from_slice(extra);
        a
    }

    fn ok(&self, cmd: &str, extra: &[&str]) -> String {
        ok(&self.args(cmd, extra))
    }

    /// Runs a command that must fail with `code`, with a message containing `why`.
    fn fails(&self, cmd: &str, extra: &[&str], code: i32, why: &str) {
        let e = fails(&self.args(cmd, extra), code);
        assert!(e.contains(why), "{cmd} {extra:?}: {e}");
    }
}

#[test]
fn outputs_are_checked_before_any_work() {
    let fx = Fixture::new();
    let root = fx.root();
    let w = root.join("w.safetensors");
    fx.ok("train", &["--save", s(&w)]);
    let saved = std::fs::read(&w).unwrap();
    let state = root.join("w.state.safetensors");
    let link = root.join("link.csv");
    std::os::unix::fs::symlink(&w, &link).unwrap();
    let not_a_dir = root.join("tiny.json/w.safetensors");
    let in_data = fx.frames.join("0/metrics.csv");
    for (extra, why) in [
        (vec!["--metrics", s(&in_data)], "lies inside the dataset"),
        (vec!["--momentum", "nan"], "finite number"),
        (vec!["--weight-decay", "-1"], "finite number"),
        (vec!["--save", s(&w), "--metrics", s(&w)], "name the same file"),
        (
            vec!["--save", s(&w), "--metrics", s(&state)],
            "name the same file",
        ),
        (vec!["--save", s(&w), "--chart", s(&link)], "name the same file"),
        (
            vec!["--load", s(&w), "--metrics", s(&link)],
            "would replace the file --load reads",
        ),
        (
            vec!["--resume", s(&state), "--save", s(&state)],
            "would replace the file --resume reads",
        ),
        (vec!["--save", s(&not_a_dir)], "cannot be written"),
    ] {
        fx.fails("train", &extra, 2, why);
        assert_eq!(std::fs::read(&w).unwrap(), saved, "{extra:?} changed the weights");
    }
    fx.fails(
        "eval",
        &["--load", s(&w), "--logits", s(&w)],
        2,
        "would replace the weights --load reads",
    );
    assert_eq!(std::fs::read(&w).unwrap(), saved);
    // Continuing into the same file is what --save with --load means: allowed.
    fx.ok("train", &["--load", s(&w), "--save", s(&w)]);
    // A device is written in place, a link's target replaced and the link kept.
    let target = root.join("metrics.csv");
    let metrics = root.join("metrics-link.csv");
    std::os::unix::fs::symlink(&target, &metrics).unwrap();
    fx.ok("train", &["--metrics", s(&metrics), "--chart", "/dev/null"]);
    assert!(
        std::fs::symlink_metadata(&metrics)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::read_to_string(&target).unwrap().starts_with("epoch,"));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert!(
        names(root)
            .iter()
            .all(|n| !n.ends_with(".tmp") && !n.ends_with(".partial"))
    );
}

#[test]
fn the_loader_s_batches_are_predicted_against_the_memory_limit() {
    let fx = Fixture::new();
    let w = fx.root().join("w.safetensors");
    fx.ok("train", &["--save", s(&w)]);
    // 4 batches of 100000 samples of [2, 2, 16, 16] f32: 1.6 GB, refused before any sample.
    let extra = ["--load", s(&w), "-n", "100000", "--memory-limit", "100MiB"];
    fx.fails("eval", &extra, 1, "4 batches of 100000 samples");
    fx.fails("eval", &extra, 1, "--memory-limit 100MiB");
}

/// Rewrites the first occurrence of `from` in `path` with `to` (same length).
fn patch(path: &Path, from: &str, to: &str) {
    let mut b = std::fs::read(path).unwrap();
    let at = b
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{from} not in {}", path.display()));
    b[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn non_finite_frames_weights_and_damaged_state_are_named() {
    let fx = Fixture::new();
    let w = fx.root().join("w.safetensors");
    fx.ok("train", &["--save", s(&w)]);

    // A state file whose epoch is damaged: an error naming the file and the entry.
    let state = fx.root().join("w.state.safetensors");
    patch(&state, "\"epoch\":\"1\"", "\"epoch\":\"x\"");
    let resume = ["--resume", s(&state), "--epochs", "2"];
    fx.fails(
        "train",
        &resume,
        1,
        "w.state.safetensors: the 'epoch' entry is 'x'",
    );

    // NaN in the weights: refused at --load, naming the tensor.
    let nan = fx.root().join("nan.safetensors");
    let mut b = std::fs::read(&w).unwrap();
    let n = b.len();
    b[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&nan, b).unwrap();
    fx.fails(
        "eval",
        &["--load", s(&nan)],
        1,
        "weights must be finite, nothing loaded",
    );
    fx.fails(
        "train",
        &["--load", s(&nan)],
        1,
        "weights must be finite, nothing loaded",
    );

    // NaN in one sample's frames: training and evaluation name the file.
    let mut values = vec![0.0; 2 * 2 * 34 * 34];
    values[5] = f64::NAN;
    let a = memopt_data::npy::NpyArray {
        shape: vec![2, 2, 34, 34],
        data: memopt_data::npy::NpyData::F64(values),
    };
    memopt_data::npz::write(&fx.frames.join("0/1.npz"), &[("frames", &a)]).unwrap();
    fx.fails("train", &[], 1, "0/1.npz: frames hold NaN at [0, 0, 0, 5]");
    fx.fails(
        "eval",
        &["--load", s(&w), "--split", "all"],
        1,
        "0/1.npz: frames hold NaN",
    );
}
