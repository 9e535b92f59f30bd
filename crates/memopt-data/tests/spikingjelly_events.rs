//! Event files of every format read to the same (t, x, y, p) and the same frames as
//! SpikingJelly 2.0 computes (fixtures from tools/fixtures/events.py; no Python needed here).

use memopt_data::npy::NpyArray;
use memopt_data::{EventFormat, Events, FrameSpec, Frames, SplitBy, aedat3, dataset, integrate, npz};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/events")
        .join(name)
}

fn reference(file: &str) -> Vec<(String, NpyArray)> {
    npz::read(&fixture(file)).unwrap()
}

fn array<'a>(refs: &'a [(String, NpyArray)], key: &str) -> &'a NpyArray {
    &refs
        .iter()
        .find(|(n, _)| n == key)
        .unwrap_or_else(|| panic!("fixture has no {key}"))
        .1
}

fn ints(refs: &[(String, NpyArray)], key: &str) -> Vec<i64> {
    array(refs, key).to_i64(Path::new(key), key).unwrap()
}

fn assert_events(ev: &Events, refs: &[(String, NpyArray)], prefix: &str) {
    assert_eq!(ev.t, ints(refs, &format!("{prefix}t")), "{prefix}t");
    let widen = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>();
    assert_eq!(widen(&ev.x), ints(refs, &format!("{prefix}x")), "{prefix}x");
    assert_eq!(widen(&ev.y), ints(refs, &format!("{prefix}y")), "{prefix}y");
    let p: Vec<i64> = ev.p.iter().map(|&x| i64::from(x)).collect();
    assert_eq!(p, ints(refs, &format!("{prefix}p")), "{prefix}p");
}

fn read(format: EventFormat, file: &str) -> Events {
    format.read(&fixture(file)).unwrap()
}

#[test]
fn every_format_reads_the_events_spikingjelly_reads() {
    let refs = reference("reference_events.npz");
    let nm = read(EventFormat::AtisBin, "nmnist.bin");
    assert_eq!(nm.len(), 700);
    assert_events(&nm, &refs, "nmnist_");
    let cf = read(EventFormat::Aedat2, "cifar10dvs.aedat");
    assert_eq!(cf.len(), 900);
    assert_events(&cf, &refs, "cifar10dvs_");
    let gs = read(EventFormat::Aedat3, "dvs128.aedat");
    assert_eq!(
        gs.len(),
        1000,
        "4 polarity packets of 250, the special-event packet skipped"
    );
    assert_events(&gs, &refs, "dvs128_");
    // SpikingJelly's own events_np cache of the N-MNIST file
    assert_eq!(read(EventFormat::Npz, "sj_events.npz"), nm);
}

#[test]
fn dvs128_samples_are_cut_by_the_labels_csv_as_spikingjelly_cuts_them() {
    let refs = reference("reference_events.npz");
    let gs = read(EventFormat::Aedat3, "dvs128.aedat");
    let samples = aedat3::split_by_labels(&gs, &fixture("dvs128_labels.csv"), 11).unwrap();
    assert_eq!(samples.len(), 3);
    for s in &samples {
        let prefix = format!("split_{}_user01_led_{}_", s.class, s.index);
        assert!(
            !s.events.is_empty(),
            "{prefix} is empty: the fixture should hold events"
        );
        assert_events(&s.events, &refs, &prefix);
    }
}

fn assert_frames(f: &Frames, refs: &[(String, NpyArray)], key: &str) {
    let a = array(refs, key);
    assert_eq!(f.dims.to_vec(), a.shape, "{key} shape");
    assert_eq!(f.data, a.to_f32(), "{key} counts");
    assert!(f.data.iter().any(|&v| v > 0.0));
}

#[test]
fn frames_equal_spikingjelly_counts_by_number_by_time_and_by_duration() {
    let refs = reference("reference_frames.npz");
    let cases = [
        (
            EventFormat::AtisBin,
            read(EventFormat::AtisBin, "nmnist.bin"),
            "nmnist_",
            34,
        ),
        (
            EventFormat::Aedat2,
            read(EventFormat::Aedat2, "cifar10dvs.aedat"),
            "cifar10dvs_",
            128,
        ),
    ];
    let gs = read(EventFormat::Aedat3, "dvs128.aedat");
    let gesture = aedat3::split_by_labels(&gs, &fixture("dvs128_labels.csv"), 11).unwrap();
    let sample = gesture
        .into_iter()
        .find(|s| s.class == 2 && s.index == 0)
        .unwrap()
        .events;
    let cases = cases
        .into_iter()
        .chain([(EventFormat::Aedat3, sample, "dvs128_", 128)]);
    for (_, ev, prefix, size) in cases {
        for (split_by, name) in [(SplitBy::Number, "number4"), (SplitBy::Time, "time4")] {
            let f = integrate(&ev, FrameSpec::Number { frames: 4, split_by }, size, size).unwrap();
            assert_frames(&f, &refs, &format!("{prefix}{name}"));
        }
        let duration_us = ints(&refs, &format!("{prefix}duration_us"))[0];
        let f = integrate(&ev, FrameSpec::Duration { duration_us }, size, size).unwrap();
        assert_frames(&f, &refs, &format!("{prefix}duration"));
    }
}

#[test]
fn resizing_matches_torchvision_resize_of_the_cifar10dvs_example() {
    let refs = reference("reference_frames.npz");
    for (fmt, file, size, key) in [
        (
            EventFormat::Aedat2,
            "cifar10dvs.aedat",
            128,
            "cifar10dvs_number4_resized48",
        ),
        (EventFormat::AtisBin, "nmnist.bin", 34, "nmnist_number4_resized48"),
    ] {
        let ev = read(fmt, file);
        let spec = FrameSpec::Number {
            frames: 4,
            split_by: SplitBy::Number,
        };
        let f = integrate(&ev, spec, size, size).unwrap();
        let r = memopt_data::resize_bilinear_aa(&f, 48, 48).unwrap();
        let want = array(&refs, key).to_f32();
        assert_eq!(r.dims.to_vec(), array(&refs, key).shape);
        let worst = r
            .data
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0f32, f32::max);
        // float rounding only: PyTorch sums in float32, memopt in f64
        assert!(
            worst < 1e-5,
            "{key}: worst difference {worst} (relative to max(|value|, 1))"
        );
    }
}

#[test]
fn spikingjelly_frame_cache_and_train_test_split_are_read_as_spikingjelly_reads_them() {
    let refs = reference("reference_frames.npz");
    let f = dataset::read_frames(&fixture("sj_frames.npz")).unwrap();
    assert_frames(&f, &refs, "nmnist_number4");
    let ev = reference("reference_events.npz");
    let labels: Vec<usize> = ints(&ev, "split_labels").iter().map(|&l| l as usize).collect();
    let (train, test) = memopt_data::split_train_test(&labels, 3, 0.7).unwrap();
    let as_i64 = |v: Vec<usize>| v.into_iter().map(|x| x as i64).collect::<Vec<_>>();
    assert_eq!(as_i64(train), ints(&ev, "split_train"));
    assert_eq!(as_i64(test), ints(&ev, "split_test"));
}

/// A copy of the fixture `file` without its last `cut` bytes, in `dir`.
fn truncated_copy(dir: &tempfile::TempDir, file: &str, cut: usize) -> PathBuf {
    let bytes = std::fs::read(fixture(file)).unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, &bytes[..bytes.len() - cut]).unwrap();
    path
}

#[test]
fn a_truncated_last_event_is_an_error_naming_the_file_and_byte_offset() {
    let dir = tempfile::Builder::new()
        .prefix("memopt-data-trunc-")
        .tempdir()
        .unwrap();
    let p = truncated_copy(&dir, "nmnist.bin", 2);
    let e = EventFormat::AtisBin.read(&p).unwrap_err().to_string();
    assert!(
        e.contains("nmnist.bin") && e.contains("at byte 3495") && e.contains("truncated event"),
        "{e}"
    );
    let p = truncated_copy(&dir, "cifar10dvs.aedat", 3);
    let e = EventFormat::Aedat2.read(&p).unwrap_err().to_string();
    assert!(
        e.contains("cifar10dvs.aedat") && e.contains("truncated event"),
        "{e}"
    );
    let p = truncated_copy(&dir, "dvs128.aedat", 5);
    let e = EventFormat::Aedat3.read(&p).unwrap_err().to_string();
    assert!(
        e.contains("dvs128.aedat") && e.contains("truncated packet"),
        "{e}"
    );
    let e = EventFormat::from_name("dat").unwrap_err().to_string();
    assert!(e.contains("nmnist, cifar10dvs, dvs128, npz"), "{e}");
}

#[test]
fn written_npz_reads_back_and_split_by_time_with_an_empty_frame_is_an_error() {
    let dir = tempfile::Builder::new()
        .prefix("memopt-data-npz-")
        .tempdir()
        .unwrap();
    let ev = read(EventFormat::AtisBin, "nmnist.bin");
    let spec = FrameSpec::Number {
        frames: 4,
        split_by: SplitBy::Number,
    };
    let f = integrate(&ev, spec, 34, 34).unwrap();
    let path = dir.path().join("f.npz");
    let a = NpyArray {
        shape: f.dims.to_vec(),
        data: memopt_data::npy::NpyData::F64(f.data.iter().map(|&v| f64::from(v)).collect()),
    };
    npz::write(&path, &[("frames", &a)]).unwrap();
    assert_eq!(dataset::read_frames(&path).unwrap(), f);
    let mut sparse = Events::default();
    sparse.push(0, 1, 1, 0);
    sparse.push(1000, 1, 1, 1);
    let spec = FrameSpec::Number {
        frames: 4,
        split_by: SplitBy::Time,
    };
    let e = integrate(&sparse, spec, 34, 34).unwrap_err().to_string();
    assert!(e.contains("holds no event"), "{e}");
    sparse.push(2000, 40, 1, 1);
    let e = integrate(&sparse, FrameSpec::Duration { duration_us: 10 }, 34, 34)
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the 34x34 sensor"), "{e}");
}
