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

fn nmnist(dir: &Path, classes: usize, per_class: usize) -> Result<(), Error> {
    let mut rng = Philox::new(7);
    let band = (34 / classes.max(1)).max(1) as u32;
    for c in 0..classes {
        let class_dir = dir.join(c.to_string());
        std::fs::create_dir_all(&class_dir)?;
        for s in 0..per_class {
            let mut ev = Events::default();
            let mut t = 0i64;
            for e in 0..600 {
                t += 1 + i64::from(draw(&mut rng, 200));
                let x = if e % 4 == 0 {
                    draw(&mut rng, 34)
                } else {
                    (c as u32 * band + draw(&mut rng, band)).min(33)
                };
                ev.push(t, x, draw(&mut rng, 34), draw(&mut rng, 2) as u8);
            }
            std::fs::write(class_dir.join(format!("{s:05}.bin")), atis_bin::to_bytes(&ev)?)?;
        }
    }
    Ok(())
}

/// An AEDAT 2 file of `events` as CIFAR10-DVS's camera writes them: `#` header lines, then
/// big-endian (address, timestamp) pairs, the address holding `1 - p` in bit 0, `127 - y` in
/// bits 1..8 and `127 - x` in bits 8..15 (the inverse of `memopt_data::aedat2::read`).
fn aedat2_bytes(events: &[(u32, u32, u32, u32)]) -> Vec<u8> {
    let mut out = b"#!AER-DAT2.0\r\n# synthetic recording of memopt's synthetic_dataset\r\n".to_vec();
    for &(t, x, y, p) in events {
        let addr = ((127 - x) << 8) | ((127 - y) << 1) | (1 - p);
        out.extend_from_slice(&addr.to_be_bytes());
        out.extend_from_slice(&t.to_be_bytes());
    }
    out
}

fn cifar10dvs(dir: &Path, classes: usize, per_class: usize) -> Result<(), Error> {
    let mut rng = Philox::new(9);
    let band = (128 / classes.max(1)).max(1) as u32;
    for c in 0..classes {
        let class_dir = dir.join(c.to_string());
        std::fs::create_dir_all(&class_dir)?;
        for s in 0..per_class {
            let mut t = 0u32;
            let events: Vec<_> = (0..4000)
                .map(|e| {
                    t += 1 + draw(&mut rng, 50);
                    let x = if e % 4 == 0 {
                        draw(&mut rng, 128)
                    } else {
                        (c as u32 * band + draw(&mut rng, band)).min(127)
                    };
                    (t, x, draw(&mut rng, 128), draw(&mut rng, 2))
                })
                .collect();
            std::fs::write(class_dir.join(format!("{s:05}.aedat")), aedat2_bytes(&events))?;
        }
    }
    Ok(())
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
        Some("nmnist") => nmnist(&dir, classes, per_class)?,
        Some("cifar10dvs") => cifar10dvs(&dir, classes, per_class)?,
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
