//! `memopt frames`, `memopt train --data` (epochs, --save, --resume, --metrics, --chart) and
//! `memopt eval` end to end on an N-MNIST-format dataset the test writes.

use memopt_data::{Events, atis_bin};
use std::path::{Path, PathBuf};

mod common;

use common::{memopt, ok};

fn fails(args: &[&str], code: i32) -> String {
    let o = memopt(args);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(code), "memopt {args:?}: {stderr}");
    assert!(
        stderr.starts_with("error: ") && !stderr.contains("panicked"),
        "{stderr}"
    );
    stderr
}

/// `root/raw/<class>/<i>.bin`: class 0 fires in the left half of the sensor, class 1 in the
/// right half.
fn write_raw(root: &Path) -> PathBuf {
    let raw = root.join("raw");
    for class in 0..2u32 {
        let dir = raw.join(class.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for s in 0..4u32 {
            let mut ev = Events::default();
            for e in 0..120u32 {
                let x = class * 17 + (e * 7 + s * 3) % 17;
                ev.push(i64::from(e * 50 + s), x, (e * 11) % 34, (e % 2) as u8);
            }
            std::fs::write(dir.join(format!("{s}.bin")), atis_bin::to_bytes(&ev).unwrap()).unwrap();
        }
    }
    raw
}

/// A temporary folder (removed with everything in it when dropped, also when the test fails)
/// holding `model.json` (`model`) and the frames `memopt frames` integrates from
/// [`write_raw`]'s recordings, 4 per sample; returns the folder and the two paths.
fn model_and_frames(prefix: &str, model: &str) -> (tempfile::TempDir, String, String) {
    let tmp = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let root = tmp.path();
    let raw = write_raw(root);
    let model_file = root.join("model.json");
    std::fs::write(&model_file, model).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let text = ok(&[
        "frames",
        "--data",
        &s(&raw),
        "--format",
        "nmnist",
        "--frames",
        "4",
    ]);
    assert!(text.contains("wrote 8 samples (4 frames each, 34x34)"), "{text}");
    let frames = root.join("frames_number_4_split_by_number");
    assert!(frames.join("1/3.npz").is_file());
    (tmp, s(&model_file), s(&frames))
}

const MODEL: &str = r#"{
  "name": "tiny",
  "input": { "time_steps": 4, "sample": [2, 16, 16], "classes": 2 },
  "layers": [
    { "type": "conv2d", "out": 4, "kernel": 3, "padding": 1 },
    { "type": "batch_norm" },
    { "type": "lif" },
    { "type": "max_pool", "kernel": 4 },
    { "type": "flatten" },
    { "type": "linear", "out": 2 }
  ]
}"#;

#[test]
fn frames_then_train_save_resume_and_eval() {
    let (tmp, model, frames) = model_and_frames("memopt-cli-data-", MODEL);
    let root = tmp.path();
    let (model, frames) = (Path::new(&model), Path::new(&frames));
    let s = |p: &Path| p.to_str().unwrap().to_string();

    let w = root.join("w.safetensors");
    let common = [
        "-m",
        &s(model),
        "--data",
        &s(frames),
        "--train-ratio",
        "0.75",
        "-n",
        "2",
        "--quiet",
    ];
    let mut args: Vec<String> = ["train"]
        .iter()
        .chain(common.iter())
        .map(|a| a.to_string())
        .collect();
    let metrics = root.join("m.csv");
    let chart = root.join("c.svg");
    for a in [
        "--epochs",
        "3",
        "--save",
        &s(&w),
        "--metrics",
        &s(&metrics),
        "--chart",
        &s(&chart),
        "--lr",
        "0.05",
    ] {
        args.push(a.to_string());
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = ok(&argv);
    assert!(
        text.contains("epoch 3/3") && text.contains("6 train, 2 test"),
        "{text}"
    );
    let csv = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(csv.lines().count(), 4, "header and 3 epochs:\n{csv}");
    assert!(
        csv.starts_with("epoch,lr,train_loss,train_acc,test_loss,test_acc\n1,"),
        "{csv}"
    );
    assert!(std::fs::read_to_string(&chart).unwrap().contains("<polyline"));
    assert!(root.join("w.state.safetensors").is_file());

    // resume for one more epoch; weights-only files are refused for --resume
    let mut more = args.clone();
    let at = more.iter().position(|a| a == "--epochs").unwrap();
    more[at + 1] = "4".into();
    more.extend(["--resume".to_string(), s(&root.join("w.state.safetensors"))]);
    let argv: Vec<&str> = more.iter().map(String::as_str).collect();
    let text = ok(&argv);
    assert!(
        text.contains("after epoch 3") && text.contains("epoch 4/4") && !text.contains("epoch 3/4"),
        "{text}"
    );
    let weights_only = root.join("weights-only.safetensors");
    std::fs::copy(&w, &weights_only).unwrap();
    let mut wrong = args.clone();
    wrong.extend(["--resume".to_string(), s(&weights_only)]);
    let argv: Vec<&str> = wrong.iter().map(String::as_str).collect();
    let e = fails(&argv, 1);
    assert!(e.contains("load it with --load"), "{e}");
    // ... and weights-only resumed into their own --save would be replaced: refused up front
    let mut own = args.clone();
    own.extend(["--resume".to_string(), s(&w)]);
    let argv: Vec<&str> = own.iter().map(String::as_str).collect();
    let e = fails(&argv, 2);
    assert!(e.contains("would replace the file --resume reads"), "{e}");

    let logits = root.join("l.npz");
    let text = ok(&[
        "eval",
        "-m",
        &s(model),
        "--data",
        &s(frames),
        "--train-ratio",
        "0.75",
        "--load",
        &s(&w),
        "--logits",
        &s(&logits),
    ]);
    assert!(
        text.contains("on 2 samples") && text.contains("accuracy"),
        "{text}"
    );
    let l = memopt_data::npz::read_array(&logits, "logits").unwrap();
    assert_eq!(l.shape, vec![2, 2]);

    // the model must fit the data, and weights-only options need --data
    let e = fails(&["train", "-m", &s(model), "--data", &s(frames), "-t", "2"], 1);
    assert!(e.contains("--timesteps 4"), "{e}");
    let e = fails(&["train", "-m", "spiking-mlp", "--save", &s(&w)], 2);
    assert!(e.contains("add --data DIR"), "{e}");
    let e = fails(
        &[
            "eval",
            "-m",
            "spiking-mlp",
            "--data",
            &s(frames),
            "--load",
            &s(&w),
        ],
        1,
    );
    assert!(e.contains("w.safetensors") || e.contains("model takes"), "{e}");
}

/// DVS128 Gesture recordings with SpikingJelly's trials lists: `memopt frames` writes the samples
/// of each list under `train/` and `test/`, as SpikingJelly's own cache holds them; one list
/// without the other is an error naming both.
#[test]
fn dvs128_frames_follow_spikingjelly_s_train_and_test_lists() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../memopt-data/tests/fixtures/events");
    let labels = std::fs::read_to_string(fixtures.join("dvs128_labels.csv")).unwrap();
    // One gesture per line after the header: the count of samples each recording gives.
    let samples = labels.lines().skip(1).filter(|l| !l.trim().is_empty()).count();
    let tmp = tempfile::Builder::new()
        .prefix("memopt-cli-dvs128-")
        .tempdir()
        .unwrap();
    let root = tmp.path();
    let raw = root.join("DvsGesture");
    std::fs::create_dir_all(&raw).unwrap();
    for user in ["user01_fluorescent", "user24_led"] {
        std::fs::copy(fixtures.join("dvs128.aedat"), raw.join(format!("{user}.aedat"))).unwrap();
        std::fs::write(raw.join(format!("{user}_labels.csv")), &labels).unwrap();
    }
    std::fs::write(raw.join("trials_to_train.txt"), "user01_fluorescent.aedat\n").unwrap();
    let raw_s = raw.to_str().unwrap().to_string();
    let args = ["frames", "--data", &raw_s, "--format", "dvs128", "--frames", "4"];
    let e = fails(&args, 1);
    assert!(e.contains("trials_to_train.txt and trials_to_test.txt"), "{e}");

    std::fs::write(raw.join("trials_to_test.txt"), "user24_led.aedat\n\n").unwrap();
    let text = ok(&args);
    assert!(text.contains(&format!("wrote {} samples", 2 * samples)), "{text}");
    let frames = root.join("frames_number_4_split_by_number");
    let count = |split: &str, user: &str| {
        (0..11)
            .flat_map(|c| {
                std::fs::read_dir(frames.join(split).join(c.to_string()))
                    .into_iter()
                    .flatten()
            })
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(user))
            })
            .count()
    };
    assert_eq!(count("train", "user01_fluorescent"), samples);
    assert_eq!(count("test", "user24_led"), samples);
    assert_eq!(
        count("train", "user24_led") + count("test", "user01_fluorescent"),
        0
    );
}

/// The three peaks of a `... peak of the run on DEVICE: X reserved (R bytes), Y allocated, Z
/// requested (Q bytes)` line: (reserved, requested) bytes.
fn run_peaks(text: &str, what: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.starts_with(what))
        .unwrap_or_else(|| panic!("no '{what}' line in:\n{text}"));
    let numbers: Vec<u64> = line
        .split('(')
        .skip(1)
        .filter_map(|w| w.split_once(" bytes").and_then(|(n, _)| n.parse().ok()))
        .collect();
    assert_eq!(numbers.len(), 2, "{line}");
    (numbers[0], numbers[1])
}

/// A model with tensors in both pools of the caching allocator (the first convolution's
/// output, 4.5 MiB at N=4, takes a large segment).
const WIDE_MODEL: &str = r#"{
  "name": "wide",
  "input": { "time_steps": 4, "sample": [2, 34, 34], "classes": 2 },
  "layers": [
    { "type": "conv2d", "out": 64, "kernel": 3, "padding": 1 },
    { "type": "batch_norm" },
    { "type": "lif" },
    { "type": "max_pool", "kernel": 2 },
    { "type": "conv2d", "out": 16, "kernel": 3, "padding": 1 },
    { "type": "batch_norm" },
    { "type": "lif" },
    { "type": "max_pool", "kernel": 17 },
    { "type": "flatten" },
    { "type": "linear", "out": 2 }
  ]
}"#;

/// `train --data --device meta` replays the whole run (batches of 4 and a last batch of 2,
/// three epochs, evaluation between them) and predicts the CPU run's peaks to the byte, with
/// either kind of segment; the CPU run states the same figure before its first step. On
/// `meta:cuda` the next batch is allocated before each step, so the GPU run's peak is higher;
/// options that need values are refused on Meta, and a GPU the machine lacks is one line.
#[test]
fn a_data_run_on_meta_predicts_the_cpu_run_s_peaks_exactly() {
    let (_tmp, model, frames) = model_and_frames("memopt-cli-data-meta-", WIDE_MODEL);
    let run = |device: &str, expandable: &str| {
        ok(&[
            "--expandable-segments",
            expandable,
            "train",
            "-m",
            &model,
            "--data",
            &frames,
            "--train-ratio",
            "0.75",
            "-n",
            "4",
            "--epochs",
            "3",
            "--quiet",
            "--device",
            device,
        ])
    };
    for expandable in ["true", "false"] {
        let predicted = run("meta", expandable);
        let measured = run("cpu", expandable);
        assert!(
            measured.contains("(the last of each epoch 2: trained, and replayed in the peak below)"),
            "{measured}"
        );
        let want = run_peaks(&predicted, "predicted peak of the run on meta");
        // The layout repeats before the third epoch, so the replay stops early.
        assert!(predicted.contains("of 3 epochs replayed on Meta"), "{predicted}");
        assert_eq!(
            run_peaks(&measured, "measured peak of the run on cpu"),
            want,
            "{predicted}\n{measured}"
        );
        assert_eq!(
            run_peaks(&measured, "planned peak of the run on cpu"),
            want,
            "{measured}"
        );
        assert!(want.0 > 2 << 20, "both pools take segments: {want:?}");
        let gpu = run_peaks(
            &run("meta:cuda", expandable),
            "predicted peak of the run on meta:cuda",
        );
        assert!(
            gpu.1 > want.1,
            "the batch uploading ahead adds to the GPU's peak: {gpu:?} vs {want:?}"
        );
    }

    let base = ["train", "-m", &model, "--data", &frames, "--quiet"];
    fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
        base.iter().chain(more).copied().collect()
    }
    let e = fails(
        &with(&base, &["--device", "meta:cuda", "--save", "w.safetensors"]),
        2,
    );
    assert!(
        e.contains("--save needs values") && e.contains("meta:cuda"),
        "{e}"
    );
    let e = fails(
        &[
            "eval",
            "-m",
            &model,
            "--data",
            &frames,
            "--load",
            "w.safetensors",
            "--device",
            "meta",
        ],
        2,
    );
    assert!(e.contains("evaluation reads values"), "{e}");
    if memopt_core::cuda_device_count().unwrap_or(0) == 0 {
        let e = fails(&with(&base, &["--device", "cuda"]), 1);
        assert!(
            e.contains("valid devices here are cpu, meta and meta:cuda"),
            "{e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        let e = fails(
            &[
                "eval",
                "-m",
                &model,
                "--data",
                &frames,
                "--load",
                "w.safetensors",
                "--device",
                "cuda",
            ],
            1,
        );
        assert!(e.contains("valid devices here"), "{e}");
    }
}
