//! Hostile data, one test per class of attack at its mechanism: sizes bounded before anything
//! is allocated, archive entries bounded by their declared size, headers parsed as NumPy
//! parses them, no silent garbage (non-finite frames and weights, damaged metadata, empty
//! label files), checked timestamp arithmetic and the saved weights/state pair.

use memopt_checkpoint::optim::Sgd;
use memopt_checkpoint::zoo::custom::CustomModel;
use memopt_checkpoint::{Model, Trainer};
use memopt_core::Device;
use memopt_core::kernels::SgdConfig;
use memopt_data::npy::{NpyArray, NpyData};
use memopt_data::weights::{WeightsInfo, load_model, load_training, save_model, save_pair, state_path};
use memopt_data::{
    DataError, Events, FrameSpec, MemoryBudget, SplitBy, aedat3, dataset, frame_count, integrate,
    integrate_within, npy, npz,
};
use std::path::Path;

fn events(ts: &[i64]) -> Events {
    let mut ev = Events::default();
    for (i, &t) in ts.iter().enumerate() {
        ev.push(t, (i % 4) as u32, 0, (i % 2) as u8);
    }
    ev
}

fn by_duration(d: i64) -> FrameSpec {
    FrameSpec::Duration { duration_us: d }
}

fn by_number(frames: usize, split_by: SplitBy) -> FrameSpec {
    FrameSpec::Number { frames, split_by }
}

#[test]
fn frame_sizes_are_predicted_and_refused_before_allocation() {
    // Two N-MNIST events 8.4 s apart in 1 µs frames: 8.4 million frames of 34x34, 77.6 GB.
    let ev = events(&[0, 8_388_607]);
    let budget = MemoryBudget::new(1 << 30, "a 1 GiB test limit");
    let e = integrate_within(&ev, by_duration(1), 34, 34, &budget).unwrap_err();
    let DataError::Memory { need_bytes, what, .. } = &e else {
        panic!("{e}")
    };
    assert!(*need_bytes > 77_000_000_000, "{e}");
    assert!(what.contains("[8388607, 2, 34, 34]"), "{e}");
    assert!(e.to_string().contains("a 1 GiB test limit"), "{e}");
    // A frame count or a sensor from the command line, the same way.
    for (spec, h, w) in [
        (by_number(1_000_000_000, SplitBy::Number), 34, 34),
        (by_number(1, SplitBy::Number), 100_000, 100_000),
    ] {
        let e = integrate_within(&ev, spec, h, w, &budget).unwrap_err();
        assert!(matches!(e, DataError::Memory { .. }), "{e}");
    }
    // Beyond the address space: an error, not an overflow.
    let e = integrate_within(&ev, by_number(usize::MAX, SplitBy::Number), 34, 34, &budget).unwrap_err();
    assert!(e.to_string().contains("more values than fit"), "{e}");
    // Within the budget the same path integrates exactly.
    let f = integrate_within(&ev, by_duration(4_194_304), 34, 34, &budget).unwrap();
    assert_eq!(f.dims, [2, 2, 34, 34]);
    assert_eq!(f.data.iter().sum::<f32>(), 2.0);
}

#[test]
fn timestamps_at_the_ends_of_i64_are_checked_arithmetic() {
    let ev = events(&[i64::MIN, 0, i64::MAX]);
    // The span is 2^64 - 1 µs: i64::MAX-µs frames give 3 frames, every event counted once.
    assert_eq!(frame_count(&ev.t, by_duration(i64::MAX)).unwrap(), 3);
    let f = integrate(&ev, by_duration(i64::MAX), 1, 4).unwrap();
    assert_eq!(f.data.iter().sum::<f32>(), 3.0);
    // 1 µs frames over that span: 2^64 - 1 frames, counted exactly and refused, no overflow.
    assert_eq!(frame_count(&ev.t, by_duration(1)).unwrap(), usize::MAX);
    let e = integrate(&ev, by_duration(1), 1, 4).unwrap_err().to_string();
    assert!(e.contains("more values than fit"), "{e}");
    // Split by time over the whole range: exact interval bounds.
    let f = integrate(&ev, by_number(2, SplitBy::Time), 1, 4).unwrap();
    assert_eq!(f.data.iter().sum::<f32>(), 3.0);
    // A stream ending before it starts is named as such, not as an empty inverted interval.
    let e = integrate(&events(&[i64::MAX, i64::MIN]), by_number(2, SplitBy::Time), 1, 4)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("earlier than the first") && e.contains("split by number"),
        "{e}"
    );
    // A DVS128 packet whose overflow counter is 0xFFFFFFFF: t near 2^63 stays exact.
    let mut raw = b"#!AER-DAT3.1\r\n#!END-HEADER\r\n".to_vec();
    for (overflow, t) in [(0u32, 5u32), (u32::MAX, 7)] {
        let mut header = [0u8; 28];
        header[0] = 1; // polarity events
        header[4] = 8; // event size
        header[12..16].copy_from_slice(&overflow.to_le_bytes());
        header[16] = 1; // capacity
        header[20] = 1; // number
        raw.extend_from_slice(&header);
        raw.extend_from_slice(&((3u32 << 17) | (2 << 2)).to_le_bytes());
        raw.extend_from_slice(&t.to_le_bytes());
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("overflow.aedat");
    std::fs::write(&file, raw).unwrap();
    let ev = aedat3::read(&file).unwrap();
    assert_eq!(ev.t, [5, (i64::from(u32::MAX) << 31) | 7]);
    let budget = MemoryBudget::new(1 << 30, "a 1 GiB test limit");
    let e = integrate_within(&ev, by_duration(1000), 128, 128, &budget).unwrap_err();
    assert!(
        matches!(e, DataError::Memory { .. }) || e.to_string().contains("more values than fit"),
        "{e}"
    );
}

/// An `.npz` of one array `frames` of `values` zeros (deflates about a thousandfold).
fn zeros_npz(path: &Path, values: usize) {
    let a = NpyArray {
        shape: vec![values / 8, 2, 2, 2],
        data: NpyData::F32(vec![0.0; values]),
    };
    npz::write(path, &[("frames", &a)]).unwrap();
}

/// Rewrites the uncompressed size of every entry (local and central headers) to `size`.
fn lie_about_sizes(path: &Path, size: u32) {
    let mut b = std::fs::read(path).unwrap();
    let mut i = 0;
    while i + 4 <= b.len() {
        match b[i..i + 4] {
            [0x50, 0x4b, 0x03, 0x04] => b[i + 22..i + 26].copy_from_slice(&size.to_le_bytes()),
            [0x50, 0x4b, 0x01, 0x02] => b[i + 24..i + 28].copy_from_slice(&size.to_le_bytes()),
            _ => {}
        }
        i += 1;
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn archive_entries_inflate_only_to_what_they_declare_and_the_budget_allows() {
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.npz");
    zeros_npz(&bomb, 16 << 20); // 64 MiB of f32 zeros in about 64 KiB
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let budget = MemoryBudget::new(8 << 20, "an 8 MiB test limit");
    let e = npz::read_within(&bomb, &budget).unwrap_err();
    let DataError::Memory { need_bytes, what, .. } = &e else {
        panic!("{e}")
    };
    assert!(*need_bytes > 64 << 20 && what.contains("frames.npy"), "{e}");
    // An entry whose header understates its size stops at the declared size.
    let liar = dir.path().join("liar.npz");
    zeros_npz(&liar, 1 << 16);
    lie_about_sizes(&liar, 1024);
    let e = npz::read(&liar).unwrap_err().to_string();
    assert!(e.contains("liar.npz") && e.contains("declared"), "{e}");
    // Many honest entries add up: each is checked against what the ones before it hold.
    let many = dir.path().join("many.npz");
    let a = NpyArray {
        shape: vec![1 << 18],
        data: NpyData::F32(vec![0.0; 1 << 18]),
    };
    let entries: Vec<(String, &NpyArray)> = (0..16).map(|i| (format!("a{i}"), &a)).collect();
    let named: Vec<(&str, &NpyArray)> = entries.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    npz::write(&many, &named).unwrap();
    let e = npz::read_within(&many, &budget).unwrap_err().to_string();
    assert!(e.contains("arrays read before it"), "{e}");
    // One array is read alone: the others are never inflated.
    assert_eq!(
        npz::read_array_within(&many, "a15", &budget).unwrap().len(),
        1 << 18
    );
    // Honest archives read within the budget.
    let fine = dir.path().join("fine.npz");
    zeros_npz(&fine, 1024);
    assert_eq!(
        dataset::read_frames_within(&fine, &budget).unwrap().dims,
        [128, 2, 2, 2]
    );
}

/// An `.npy` file with `header` (padded as NumPy pads it) and 24 bytes of `<f4` data.
fn npy_with(header: &str) -> Vec<u8> {
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    for v in 0..6 {
        b.extend_from_slice(&(v as f32).to_le_bytes());
    }
    b
}

#[test]
fn npy_headers_are_parsed_as_numpy_parses_them() {
    let p = Path::new("a.npy");
    // NumPy accepts any spacing and either quote: all of these are C-order [2, 3].
    for h in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr':'<f4','fortran_order':False,'shape':(2,3)}",
        "{\"descr\": \"<f4\", \"shape\": (2, 3), \"fortran_order\": False}",
    ] {
        let a = npy::parse(p, &npy_with(h)).unwrap_or_else(|e| panic!("{h}: {e}"));
        assert_eq!(a.shape, [2, 3], "{h}");
    }
    // Fortran order without a space is still Fortran order: refused, never read transposed.
    let e = npy::parse(p, &npy_with("{'descr':'<f4','fortran_order':True,'shape':(2,3)}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Fortran-order"), "{e}");
    for (h, why) in [
        ("{'descr': '<f4', 'shape': (2, 3)}", "all required"),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 'y'}",
            "unknown key",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,)}",
            "twice",
        ),
        (
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}",
            "unreadable value",
        ),
    ] {
        let e = npy::parse(p, &npy_with(h)).unwrap_err().to_string();
        assert!(e.contains(why), "{h}: {e}");
    }
}

#[test]
fn frames_files_must_hold_finite_values_of_nonzero_shape() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, shape: Vec<usize>, data: Vec<f32>| {
        let path = dir.path().join(name);
        let a = NpyArray {
            shape,
            data: NpyData::F32(data),
        };
        npz::write(&path, &[("frames", &a)]).unwrap();
        path
    };
    let mut values = vec![0.0; 16];
    values[13] = f32::NAN;
    let nan = write("nan.npz", vec![2, 2, 2, 2], values);
    let e = dataset::read_frames(&nan).unwrap_err().to_string();
    assert!(e.contains("nan.npz") && e.contains("NaN at [1, 1, 0, 1]"), "{e}");
    let inf = write("inf.npz", vec![1, 1, 1, 2], vec![0.0, f32::INFINITY]);
    assert!(
        dataset::read_frames(&inf)
            .unwrap_err()
            .to_string()
            .contains("inf")
    );
    let empty = write("empty.npz", vec![4, 2, 0, 0], Vec::new());
    let e = dataset::read_frames(&empty).unwrap_err().to_string();
    assert!(e.contains("[4, 2, 0, 0]") && e.contains("dimension of 0"), "{e}");
}

#[test]
fn a_labels_file_must_label_samples() {
    let dir = tempfile::tempdir().unwrap();
    let ev = events(&[0, 10, 20]);
    let csv = dir.path().join("user01_labels.csv");
    std::fs::write(&csv, "class,startTime_usec,endTime_usec\n").unwrap();
    let e = aedat3::split_by_labels(&ev, &csv, 11).unwrap_err().to_string();
    assert!(
        e.contains("user01_labels.csv") && e.contains("labels no sample"),
        "{e}"
    );
    std::fs::write(&csv, "class,startTime_usec,endTime_usec\n1,20,10\n").unwrap();
    let e = aedat3::split_by_labels(&ev, &csv, 11).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("before the end"), "{e}");
}

const MODEL: &str = r#"{
  "name": "hostile",
  "input": { "time_steps": 2, "sample": [4], "classes": 2 },
  "layers": [ { "type": "linear", "out": 3 }, { "type": "lif" }, { "type": "linear", "out": 2 } ]
}"#;

fn model(seed: u64) -> Model {
    let m = CustomModel::from_json(MODEL).unwrap();
    m.build(m.spec(), Device::Cpu, seed).unwrap()
}

fn trainer(model: &Model) -> Trainer {
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    };
    Trainer::new(Box::new(Sgd::new(model, cfg).unwrap()), 5)
}

fn weights_of(m: &Model) -> Vec<Vec<f32>> {
    m.params()
        .iter()
        .map(|(_, p)| p.tensor().to_vec_f32().unwrap())
        .collect()
}

/// Rewrites the file's metadata value `from` to `to` (same length keeps the header valid).
fn patch(path: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let b = std::fs::read(path).unwrap();
    let at = b.windows(from.len()).position(|w| w == from.as_bytes()).unwrap();
    let mut b2 = b.clone();
    b2[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, b2).unwrap();
}

#[test]
fn weights_must_be_finite_and_metadata_whole_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let src = model(1);
    let w = dir.path().join("w.safetensors");
    // NaN in one tensor: the load names it and changes nothing.
    src.params()[0]
        .1
        .tensor()
        .write::<f32>("test")
        .unwrap()
        .host_mut()
        .unwrap()[2] = f32::NAN;
    save_model(&w, &src, &WeightsInfo::default()).unwrap();
    let dst = model(2);
    let before = weights_of(&dst);
    let e = load_model(&w, &dst).unwrap_err().to_string();
    assert!(
        e.contains("holds NaN at index 2") && e.contains("nothing loaded"),
        "{e}"
    );
    assert_eq!(weights_of(&dst), before);
    // A damaged step count is an error naming the key, never a silent 0.
    let ok = model(3);
    let info = WeightsInfo {
        steps: 12345,
        ..WeightsInfo::default()
    };
    save_model(&w, &ok, &info).unwrap();
    patch(&w, "\"12345\"", "\"12x45\"");
    let e = load_model(&w, &dst).unwrap_err().to_string();
    assert!(e.contains("memopt.steps") && e.contains("12x45"), "{e}");
}

#[test]
fn an_interrupted_pair_save_is_refused_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("run.safetensors");
    let m = model(1);
    let tr = trainer(&m);
    let info = |steps| WeightsInfo {
        steps,
        ..WeightsInfo::default()
    };
    save_pair(&w, &m, &tr, &info(10)).unwrap();
    let state = state_path(&w);
    assert_eq!(state, dir.path().join("run.state.safetensors"));
    // A consistent pair resumes.
    let m2 = model(2);
    let mut tr2 = trainer(&m2);
    load_training(&state, &m2, &mut tr2).unwrap();
    // (A save stopped while writing leaves both old files: `write_together`'s own test.)
    let old_state = std::fs::read(&state).unwrap();
    // The save after the next epoch renamed the weights, then stopped before the state.
    save_pair(&w, &m, &tr, &info(20)).unwrap();
    std::fs::write(&state, old_state).unwrap();
    let m3 = model(3);
    let mut tr3 = trainer(&m3);
    let before = weights_of(&m3);
    let e = load_training(&state, &m3, &mut tr3).unwrap_err().to_string();
    assert!(
        e.contains("not the pair of") && e.contains("after step 20") && e.contains("after step 10"),
        "{e}"
    );
    assert_eq!(weights_of(&m3), before, "a refused resume changes nothing");
    // Weights saved on their own beside the state are not a pair: the state resumes.
    save_model(&w, &m, &info(30)).unwrap();
    load_training(&state, &m3, &mut tr3).unwrap();
}
