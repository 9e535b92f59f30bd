//! NumPy `.npy` arrays (format versions 1-3): parsing the header and data of the dtypes
//! SpikingJelly's caches use, and writing `f64`, `f32` and `i64` arrays.

use crate::budget::{MemoryBudget, bytes_of, collect, with_capacity};
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

    /// Bytes the values hold (8 per `f8` and integer value, 4 per `f4`).
    pub fn bytes(&self) -> u64 {
        let width = match &self.data {
            NpyData::F32(_) => 4,
            NpyData::F64(_) | NpyData::Int(_) => 8,
        };
        self.len() as u64 * width
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

    /// [`NpyArray::to_f32`], allocated fallibly within `budget`.
    pub fn to_f32_within(&self, budget: &MemoryBudget) -> Result<Vec<f32>> {
        budget.check(bytes_of::<f32>(self.len(), "array")?, || {
            format!("{} values as f32", self.len())
        })?;
        Ok(match &self.data {
            NpyData::F64(v) => collect(v.len(), v.iter().map(|&x| x as f32))?,
            NpyData::F32(v) => collect(v.len(), v.iter().copied())?,
            NpyData::Int(v) => collect(v.len(), v.iter().map(|&x| x as f32))?,
        })
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
    parse_within(path, b, &MemoryBudget::unlimited())
}

/// [`parse`], refusing before the values are allocated when they exceed `budget` (integers
/// widen to 8 bytes each).
pub fn parse_within(path: &Path, b: &[u8], budget: &MemoryBudget) -> Result<NpyArray> {
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
    let Header {
        descr,
        fortran_order,
        shape,
    } = Header::parse(header).map_err(|m| bad(hstart, format!("{m} in header {header}")))?;
    if fortran_order {
        return Err(bad(
            hstart,
            "Fortran-order arrays are not supported; save with C order".into(),
        ));
    }
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
    let widened = bytes_of::<i64>(count, "array").map_err(|e| bad(hstart, e.to_string()))?;
    budget.check(widened, || format!("array {} of shape {shape:?}", path.display()))?;
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
        ('f', 8) => NpyData::F64(collect(count, (0..count).map(|i| f64::from_le_bytes(word(i))))?),
        ('f', 4) => NpyData::F32(collect(
            count,
            (0..count).map(|i| {
                let w = word(i);
                f32::from_le_bytes([w[0], w[1], w[2], w[3]])
            }),
        )?),
        ('i', _) => NpyData::Int(collect(
            count,
            (0..count).map(|i| {
                let v = i64::from_le_bytes(word(i));
                let shift = 64 - 8 * size as u32;
                (v << shift) >> shift
            }),
        )?),
        ('u' | 'b', _) => {
            let mut out = with_capacity(count)?;
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

/// The header of an `.npy` file: the Python dict literal NumPy writes and reads
/// (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`), parsed as a literal with any
/// spacing and quotes, exactly these three keys, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A value of the header dict.
enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

impl Header {
    fn parse(text: &str) -> std::result::Result<Header, String> {
        let mut p = Literals {
            rest: text.trim_start(),
        };
        p.expect('{')?;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        while !p.eat('}') {
            let key = match p.value()? {
                Literal::Str(k) => k,
                _ => return Err("a key that is not a string".into()),
            };
            p.expect(':')?;
            let value = p.value()?;
            let slot_taken = match (key.as_str(), value) {
                ("descr", Literal::Str(v)) => descr.replace(v).is_some(),
                ("fortran_order", Literal::Bool(v)) => fortran.replace(v).is_some(),
                ("shape", Literal::Tuple(v)) => shape.replace(v).is_some(),
                ("descr" | "fortran_order" | "shape", _) => {
                    return Err(format!("'{key}' has a value of the wrong kind"));
                }
                _ => {
                    return Err(format!(
                        "unknown key '{key}' (NumPy writes descr, fortran_order, shape)"
                    ));
                }
            };
            if slot_taken {
                return Err(format!("'{key}' given twice"));
            }
            if !p.eat(',') {
                p.expect('}')?;
                break;
            }
        }
        if !p.rest.trim().is_empty() {
            return Err(format!("text after the dict: '{}'", p.rest.trim()));
        }
        match (descr, fortran, shape) {
            (Some(descr), Some(fortran_order), Some(shape)) => Ok(Header {
                descr,
                fortran_order,
                shape,
            }),
            _ => Err("descr, fortran_order and shape are all required".into()),
        }
    }
}

/// A cursor over Python literals.
struct Literals<'a> {
    rest: &'a str,
}

impl Literals<'_> {
    /// Consumes `c` (after spaces) when it comes next.
    fn eat(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "expected '{c}' at '{}'",
                self.rest.chars().take(20).collect::<String>()
            ))
        }
    }

    fn value(&mut self) -> std::result::Result<Literal, String> {
        self.rest = self.rest.trim_start();
        for (word, v) in [("True", true), ("False", false)] {
            if let Some(r) = self.rest.strip_prefix(word) {
                self.rest = r;
                return Ok(Literal::Bool(v));
            }
        }
        if let Some(q) = self.rest.chars().next().filter(|c| *c == '\'' || *c == '"') {
            let body = &self.rest[1..];
            let end = body.find(q).ok_or("an unterminated string")?;
            let s = body[..end].to_string();
            self.rest = &body[end + 1..];
            return Ok(Literal::Str(s));
        }
        if self.eat('(') {
            let mut dims = Vec::new();
            while !self.eat(')') {
                let digits = self.rest.trim_start();
                let len = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
                let dim = digits[..len]
                    .parse::<usize>()
                    .map_err(|_| format!("a shape entry that is not a whole number at '{digits}'"))?;
                dims.push(dim);
                self.rest = &digits[len..];
                if !self.eat(',') {
                    self.expect(')')?;
                    break;
                }
            }
            return Ok(Literal::Tuple(dims));
        }
        Err(format!(
            "an unreadable value at '{}'",
            self.rest.chars().take(20).collect::<String>()
        ))
    }
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
