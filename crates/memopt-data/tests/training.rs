//! A short training run on an N-MNIST-format dataset the test writes (ATIS .bin files in class
//! folders, integrated and resized on the loader thread): the loss falls, and a run resumed from
//! a saved file continues bit-identically to an uninterrupted one.

use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{Model, Trainer};
use memopt_core::kernels::SgdConfig;
use memopt_core::{Device, Philox};
use memopt_data::training::{EpochPlan, Schedule, run_epoch};
use memopt_data::weights::{WeightsInfo, load_training, save_training};
use memopt_data::{Dataset, EventFormat, FrameSpec, SampleSource, SplitBy, split_train_test};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CLASSES: usize = 4;
const PER_CLASS: usize = 6;

/// Class `c` fires mostly in quadrant `c` of the 34x34 sensor, with some noise everywhere.
fn write_dataset(root: &Path) {
    let mut rng = Philox::new(7);
    let mut u = |n: u32| (rng.next_uniform() * n as f32) as u32 % n;
    for c in 0..CLASSES {
        let dir = root.join(c.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for s in 0..PER_CLASS {
            let mut bytes = Vec::new();
            let mut t = 0u32;
            for e in 0..240 {
                t += 1 + u(400);
                let (x, y) = if e % 4 == 0 {
                    (u(34), u(34))
                } else {
                    ((c as u32 % 2) * 17 + u(17), (c as u32 / 2) * 17 + u(17))
                };
                let p = u(2);
                bytes.extend_from_slice(&[
                    x as u8,
                    y as u8,
                    ((p << 7) | ((t >> 16) & 0x7F)) as u8,
                    (t >> 8) as u8,
                    t as u8,
                ]);
            }
            std::fs::write(dir.join(format!("{s:05}.bin")), bytes).unwrap();
        }
    }
}

/// The dataset, written into `dir`.
fn dataset(dir: &tempfile::TempDir) -> Arc<Dataset> {
    let root: PathBuf = dir.path().join("nmnist");
    write_dataset(&root);
    let source = SampleSource::Events {
        format: EventFormat::AtisBin,
        spec: FrameSpec::Number {
            frames: 4,
            split_by: SplitBy::Number,
        },
        sensor: (34, 34),
    };
    let mut data = Dataset::open(&root, source).unwrap();
    data.resize = Some((16, 16));
    Arc::new(data)
}

const MODEL: &str = r#"{
  "name": "tiny-nmnist",
  "input": { "time_steps": 4, "sample": [2, 16, 16], "classes": 4 },
  "layers": [
    { "type": "conv2d", "out": 8, "kernel": 3, "padding": 1, "bias": false },
    { "type": "batch_norm" },
    { "type": "lif", "tau": 2.0, "detach_reset": true, "surrogate": "atan" },
    { "type": "max_pool", "kernel": 4 },
    { "type": "flatten" },
    { "type": "dropout", "p": 0.1 },
    { "type": "linear", "out": 4 }
  ]
}"#;

fn model(seed: u64) -> Model {
    let m = CustomModel::from_json(MODEL).unwrap();
    m.build(m.spec(), Device::Cpu, seed).unwrap()
}

fn trainer(model: &Model) -> Trainer {
    let cfg = SgdConfig {
        lr: 0.0,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 1e-4,
        nesterov: false,
    };
    Trainer::new(Box::new(Sgd::new(model, cfg).unwrap()), 11)
}

const PLAN: EpochPlan = EpochPlan {
    base_lr: 0.2,
    schedule: Schedule::Cosine { t_max: 4 },
    seed: 3,
    batch_size: 4,
};

fn state(model: &Model, trainer: &Trainer) -> Vec<Vec<u32>> {
    let bits = |t: &memopt_core::Tensor| t.to_vec_f32().unwrap().iter().map(|v| v.to_bits()).collect();
    let mut out: Vec<Vec<u32>> = model.params().iter().map(|(_, p)| bits(p.tensor())).collect();
    out.extend(model.buffers().iter().map(|(_, b)| bits(b.tensor())));
    out.extend(
        trainer
            .optimizer()
            .state_tensors()
            .iter()
            .map(|s| bits(&s.tensor)),
    );
    out
}

fn epochs(
    model: &Model,
    tr: &mut Trainer,
    data: &Arc<Dataset>,
    train: &[usize],
    test: &[usize],
    range: std::ops::Range<u64>,
) {
    for epoch in range {
        run_epoch(model, tr, data, train, test, &PLAN, epoch, &mut |_, _, _| {}).unwrap();
    }
}

#[test]
fn loss_falls_and_a_resumed_run_continues_bit_identically() {
    // Removed with everything in it when dropped, also when the test fails.
    let dir = tempfile::Builder::new()
        .prefix("memopt-nmnist-")
        .tempdir()
        .unwrap();
    let data = dataset(&dir);
    assert_eq!(data.len(), CLASSES * PER_CLASS);
    let (train, test) = split_train_test(&data.labels(), CLASSES, 0.75).unwrap();
    assert_eq!(
        (train.len(), test.len()),
        (20, 4),
        "ceil(6 * 0.75) = 5 per class for training"
    );
    let mut steps_seen = 0;

    // uninterrupted: 4 epochs
    let full = model(1);
    let mut full_tr = trainer(&full);
    let mut losses = Vec::new();
    for epoch in 0..4 {
        let m = run_epoch(
            &full,
            &mut full_tr,
            &data,
            &train,
            &test,
            &PLAN,
            epoch,
            &mut |_, _, _| steps_seen += 1,
        )
        .unwrap();
        losses.push(m.train.loss);
        assert_eq!(m.test.unwrap().samples, 4);
    }
    assert_eq!(steps_seen, 4 * 5, "20 samples in batches of 4: 5 steps per epoch");
    assert!(losses[3] < 0.8 * losses[0], "loss did not fall: {losses:?}");

    // interrupted after 2 epochs, saved, resumed into a fresh model and trainer
    let first = model(1);
    let mut first_tr = trainer(&first);
    epochs(&first, &mut first_tr, &data, &train, &test, 0..2);
    let file = dir.path().join("resume.safetensors");
    save_training(&file, &first, &first_tr, &WeightsInfo::default()).unwrap();
    let resumed = model(99);
    let mut resumed_tr = trainer(&resumed);
    load_training(&file, &resumed, &mut resumed_tr).unwrap();
    assert_eq!(state(&resumed, &resumed_tr), state(&first, &first_tr));
    epochs(&resumed, &mut resumed_tr, &data, &train, &test, 2..4);
    assert_eq!(resumed_tr.steps(), full_tr.steps());
    assert!(
        state(&resumed, &resumed_tr) == state(&full, &full_tr),
        "resumed run differs from the uninterrupted one"
    );
}
