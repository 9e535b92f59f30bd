//! NumPy `.npy` arrays (format versions 1-3): parsing the header and data of the dtypes
//! SpikingJelly's caches use, and writing `f64`, `f32` and `i64` arrays.

use crate::error::{DataError, Result};
use std::path::Path;

/// The values of an array, widened: floats as they are, every integer and bool type to `i64`.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `f8`.
    F64(Vec<f64>),
    /// `f4`.
    F32(Vec<f32>),
    /// Any integer or bool type.
    Int(Vec<i64>),
}

/// One array: shape (row-major) and values.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// Dimensions (empty for a scalar).
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: NpyData,
}

impl NpyArray {
    /// Number of values.
    pub fn len(&self) -> usize {
        match &self.data {
            NpyData::F64(v) => v.len(),
            NpyData::F32(v) => v.len(),
            NpyData::Int(v) => v.len(),
        }
    }

    /// Whether the array has no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as `f32` (counts and frames; integers above 2^24 lose precision).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            NpyData::F64(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::F32(v) => v.clone(),
            NpyData::Int(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// The values as integers; a float array must hold integers only. `path` and `name` go
    /// into the error.
    pub fn to_i64(&self, path: &Path, name: &str) -> Result<Vec<i64>> {
        let from_f = |x: f64| {
            if x.fract() == 0.0 && x.abs() < 9.0e15 {
                Ok(x as i64)
            } else {
                Err(DataError::file(
                    path,
                    format!("array '{name}' holds {x}, expected integers"),
                ))
            }
        };
        match &self.data {
            NpyData::Int(v) => Ok(v.clone()),
            NpyData::F64(v) => v.iter().map(|&x| from_f(x)).collect(),
            NpyData::F32(v) => v.iter().map(|&x| from_f(f64::from(x))).collect(),
        }
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// Parses one `.npy` file's bytes; `path` names the file (or `archive.npz/name.npy`) in errors.
pub fn parse(path: &Path, b: &[u8]) -> Result<NpyArray> {
    let bad = |off: usize, m: String| DataError::format(path, off as u64, m);
    if b.len() < 10 || &b[..6] != MAGIC {
        return Err(bad(0, "not a .npy array (no \\x93NUMPY magic)".into()));
    }
    let (hlen, hstart): (usize, usize) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => {
            return Err(bad(
                6,
                format!("unsupported .npy version {v} (1, 2 and 3 are read)"),
            ));
        }
    };
    let hend = hstart
        .checked_add(hlen)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| bad(8, format!("header of {hlen} bytes runs past the end")))?;
    let header =
        std::str::from_utf8(&b[hstart..hend]).map_err(|_| bad(hstart, "header is not text".into()))?;
    let descr =
        dict_str(header, "descr").ok_or_else(|| bad(hstart, format!("no 'descr' in header {header}")))?;
    if header.contains("'fortran_order': True") {
        return Err(bad(
            hstart,
            "Fortran-order arrays are not supported; save with C order".into(),
        ));
    }
    let shape =
        dict_shape(header).ok_or_else(|| bad(hstart, format!("no readable 'shape' in header {header}")))?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(hstart, format!("shape {shape:?} is too large")))?;
    let body = &b[hend..];
    let (order, kind, size) =
        split_descr(&descr).ok_or_else(|| bad(hstart, format!("unsupported dtype '{descr}'")))?;
    let need = count
        .checked_mul(size)
        .ok_or_else(|| bad(hstart, "array too large".into()))?;
    if body.len() < need {
        return Err(bad(
            hend + body.len() / size.max(1) * size,
            format!(
                "truncated data: shape {shape:?} of {descr} needs {need} bytes, {} present",
                body.len()
            ),
        ));
    }
    let big = order == '>';
    let word = |i: usize| -> [u8; 8] {
        let mut w = [0u8; 8];
        let s = &body[i * size..(i + 1) * size];
        if big {
            for (k, &x) in s.iter().rev().enumerate() {
                w[k] = x;
            }
        } else {
            w[..size].copy_from_slice(s);
        }
        w
    };
    let data = match (kind, size) {
        ('f', 8) => NpyData::F64((0..count).map(|i| f64::from_le_bytes(word(i))).collect()),
        ('f', 4) => NpyData::F32(
            (0..count)
                .map(|i| {
                    let w = word(i);
                    f32::from_le_bytes([w[0], w[1], w[2], w[3]])
                })
                .collect(),
        ),
        ('i', _) => NpyData::Int(
            (0..count)
                .map(|i| {
                    let v = i64::from_le_bytes(word(i));
                    let shift = 64 - 8 * size as u32;
                    (v << shift) >> shift
                })
                .collect(),
        ),
        ('u' | 'b', _) => {
            let mut out = Vec::with_capacity(count);
            for i in 0..count {
                let v = u64::from_le_bytes(word(i));
                out.push(
                    i64::try_from(v).map_err(|_| bad(hend + i * size, format!("value {v} exceeds i64")))?,
                );
            }
            NpyData::Int(out)
        }
        _ => return Err(bad(hstart, format!("unsupported dtype '{descr}'"))),
    };
    Ok(NpyArray { shape, data })
}

/// `('<', 'f', 8)` from `'<f8'`; sizes 1, 2, 4, 8 for ints, 4, 8 for floats, 1 for bool.
fn split_descr(d: &str) -> Option<(char, char, usize)> {
    let mut c = d.chars();
    let order = c.next()?;
    let kind = c.next()?;
    let size: usize = c.as_str().parse().ok()?;
    let ok = match kind {
        'f' => size == 4 || size == 8,
        'i' | 'u' => matches!(size, 1 | 2 | 4 | 8),
        'b' => size == 1,
        _ => false,
    };
    (matches!(order, '<' | '>' | '|' | '=') && ok).then_some((order, kind, size))
}

fn dict_str(h: &str, key: &str) -> Option<String> {
    let at = h.find(&format!("'{key}'"))?;
    let rest = &h[at + key.len() + 2..];
    let q1 = rest.find('\'')?;
    let rest = &rest[q1 + 1..];
    let q2 = rest.find('\'')?;
    Some(rest[..q2].to_string())
}

fn dict_shape(h: &str) -> Option<Vec<usize>> {
    let at = h.find("'shape'")?;
    let rest = &h[at..];
    let open = rest.find('(')?;
    let close = rest.find(')')?;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// Serialises `values` of `shape` as a version 1 `.npy` file (`<f8`, `<f4` or `<i8`).
pub fn to_bytes(shape: &[usize], data: &NpyData) -> Vec<u8> {
    let descr = match data {
        NpyData::F64(_) => "<f8",
        NpyData::F32(_) => "<f4",
        NpyData::Int(_) => "<i8",
    };
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // pad so that the data starts at a multiple of 64 bytes, the header ending in '\n'
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + 8 * shape.iter().product::<usize>());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // the header is below 64 KiB: one line of a few dozen characters plus padding
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match data {
        NpyData::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::Int(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
    out
}
