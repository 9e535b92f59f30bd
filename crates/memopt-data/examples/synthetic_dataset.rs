//! Writes a small class-structured dataset for end-to-end runs (the GPU bundle's
//! `data_e2e.sh`): class `c` fires (or is bright) mostly in its own band of the sensor, so a
//! model can learn it and the loss falls.
//!
//!     synthetic_dataset nmnist DIR CLASSES PER_CLASS
//!         N-MNIST recordings (ATIS .bin, 34x34 sensor) in DIR/<class>/<i>.bin
//!     synthetic_dataset cifar10dvs DIR CLASSES PER_CLASS
//!         CIFAR10-DVS recordings (jAER AEDAT 2 .aedat, 128x128 sensor) in DIR/<class>/<i>.aedat
//!     synthetic_dataset frames DIR CLASSES PER_CLASS T C H W
//!         cached frames (npz, array `frames` f32 [T, C, H, W]) in DIR/<class>/<i>.npz

use memopt_core::Philox;
use memopt_data::npy::{NpyArray, NpyData};
use memopt_data::{Events, atis_bin, npz};
use std::path::{Path, PathBuf};

type Error = Box<dyn std::error::Error>;

fn number(args: &[String], i: usize, what: &str) -> Result<usize, Error> {
    let s = args.get(i).ok_or_else(|| format!("missing {what}"))?;
    let n: usize = s
        .parse()
        .map_err(|_| format!("{what} must be a whole number, got '{s}'"))?;
    if n == 0 || n > 1 << 20 {
        return Err(format!("{what} must be in 1..=1048576, got {n}").into());
    }
    Ok(n)
}

/// A uniform draw in `0..n`.
fn draw(rng: &mut Philox, n: u32) -> u32 {
    (rng.next_uniform() * n as f32) as u32 % n
}

/// How one format's synthetic recordings look.
struct Recordings {
    /// Sensor side (square), in pixels.
    sensor: u32,
    /// Events per recording.
    events: usize,
    /// Largest gap between two events, in microseconds.
    max_gap: u32,
    /// Seed of the draws.
    seed: u64,
    /// File extension.
    extension: &'static str,
    /// The file's bytes.
    encode: fn(&Events) -> Result<Vec<u8>, Error>,
}

/// `per_class` recordings per class in DIR/<class>/: three events in four in the class's band
/// of columns, the rest anywhere.
fn recordings(dir: &Path, classes: usize, per_class: usize, r: &Recordings) -> Result<(), Error> {
    let mut rng = Philox::new(r.seed);
    let band = (r.sensor / classes.max(1) as u32).max(1);
    for c in 0..classes {
        let class_dir = dir.join(c.to_string());
        std::fs::create_dir_all(&class_dir)?;
        for s in 0..per_class {
            let mut ev = Events::default();
            let mut t = 0i64;
            for e in 0..r.events {
                t += 1 + i64::from(draw(&mut rng, r.max_gap));
                let x = if e % 4 == 0 {
                    draw(&mut rng, r.sensor)
                } else {
                    (c as u32 * band + draw(&mut rng, band)).min(r.sensor - 1)
                };
                ev.push(t, x, draw(&mut rng, r.sensor), draw(&mut rng, 2) as u8);
            }
            let name = format!("{s:05}.{}", r.extension);
            std::fs::write(class_dir.join(name), (r.encode)(&ev)?)?;
        }
    }
    Ok(())
}

/// N-MNIST: ATIS .bin recordings of a 34x34 sensor.
const NMNIST: Recordings = Recordings {
    sensor: 34,
    events: 600,
    max_gap: 200,
    seed: 7,
    extension: "bin",
    encode: |ev| Ok(atis_bin::to_bytes(ev)?),
};

/// CIFAR10-DVS: jAER AEDAT 2 recordings of a 128x128 sensor.
const CIFAR10DVS: Recordings = Recordings {
    sensor: 128,
    events: 4000,
    max_gap: 50,
    seed: 9,
    extension: "aedat",
    encode: |ev| Ok(aedat2_bytes(ev)),
};

/// An AEDAT 2 file of `events` as CIFAR10-DVS's camera writes them: `#` header lines, then
/// big-endian (address, timestamp) pairs, the address holding `1 - p` in bit 0, `127 - y` in
/// bits 1..8 and `127 - x` in bits 8..15 (the inverse of `memopt_data::aedat2::read`).
fn aedat2_bytes(events: &Events) -> Vec<u8> {
    let mut out = b"#!AER-DAT2.0\r\n# synthetic recording of memopt's synthetic_dataset\r\n".to_vec();
    for i in 0..events.len() {
        let (x, y, p) = (events.x[i], events.y[i], u32::from(events.p[i]));
        let addr = ((127 - x) << 8) | ((127 - y) << 1) | (1 - p);
        out.extend_from_slice(&addr.to_be_bytes());
        out.extend_from_slice(&(events.t[i] as u32).to_be_bytes());
    }
    out
}

fn frames(dir: &Path, classes: usize, per_class: usize, dims: [usize; 4]) -> Result<(), Error> {
    let [t, c, h, w] = dims;
    let len = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= 1 << 28)
        .ok_or("frames of more than 2^28 values per sample")?;
    let mut rng = Philox::new(11);
    let band = (h / classes.max(1)).max(1);
    for class in 0..classes {
        let class_dir = dir.join(class.to_string());
        std::fs::create_dir_all(&class_dir)?;
        for s in 0..per_class {
            let mut data = vec![0f32; len];
            for (i, v) in data.iter_mut().enumerate() {
                let row = (i / w) % h;
                let own = row / band == class;
                let u = rng.next_uniform();
                *v = if own { (u * 4.0).floor() } else { (u * 1.2).floor() };
            }
            let frames = NpyArray {
                shape: vec![t, c, h, w],
                data: NpyData::F32(data),
            };
            std::fs::write(
                class_dir.join(format!("{s:05}.npz")),
                npz::to_bytes(&[("frames", &frames)])?,
            )?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: synthetic_dataset nmnist|cifar10dvs DIR CLASSES PER_CLASS | frames DIR CLASSES PER_CLASS T C H W";
    let dir = PathBuf::from(args.get(1).ok_or(usage)?);
    let classes = number(&args, 2, "CLASSES")?;
    let per_class = number(&args, 3, "PER_CLASS")?;
    match args.first().map(String::as_str) {
        Some("nmnist") => recordings(&dir, classes, per_class, &NMNIST)?,
        Some("cifar10dvs") => recordings(&dir, classes, per_class, &CIFAR10DVS)?,
        Some("frames") => {
            let dims = [
                number(&args, 4, "T")?,
                number(&args, 5, "C")?,
                number(&args, 6, "H")?,
                number(&args, 7, "W")?,
            ];
            frames(&dir, classes, per_class, dims)?;
        }
        _ => return Err(usage.into()),
    }
    println!(
        "wrote {} samples of {classes} classes under {}",
        classes * per_class,
        dir.display()
    );
    Ok(())
}
