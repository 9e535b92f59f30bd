//! DVS128 Gesture's AEDAT 3.1 files, read as SpikingJelly's `load_aedat_v3` does: an ASCII
//! header up to `#!END-HEADER\r\n`, then packets of a 28-byte little-endian header (event type,
//! source, event size, timestamp offset, timestamp overflow, capacity, number, valid) and
//! `capacity * size` bytes of events. Polarity events (type 1) hold a `u32` address (`x` in bits
//! 17..32, `y` in bits 2..17, polarity in bit 1) and a `u32` timestamp (µs), to which the
//! packet's overflow adds `overflow << 31`. Other packets are skipped. DVS128 Gesture labels
//! recordings with a CSV of `class, start µs, end µs`; [`split_by_labels`] cuts samples as
//! SpikingJelly does.

use crate::budget::MemoryBudget;
use crate::error::{DataError, Result, read_all_within};
use crate::events::{Events, check_events};
use std::path::Path;

const PACKET_HEADER: usize = 28;
const POLARITY_EVENT: u16 = 1;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Reads an AEDAT 3.1 file. A packet cut short is an error naming its offset.
pub fn read(path: &Path) -> Result<Events> {
    read_within(path, &MemoryBudget::unlimited())
}

/// [`read`] within `budget` (see [`crate::EventFormat::read_within`]).
pub fn read_within(path: &Path, budget: &MemoryBudget) -> Result<Events> {
    let raw = read_all_within(path, budget)?;
    let mut count = 0usize;
    walk_polarity(path, &raw, &mut |_, _| count += 1)?;
    check_events(path, count, raw.len() as u64, budget)?;
    let mut ev = Events::with_capacity(count)?;
    walk_polarity(path, &raw, &mut |e, overflow| {
        let addr = u32_at(e, 0);
        let t = i64::from(u32_at(e, 4)) | (overflow << 31);
        ev.push(
            t,
            (addr >> 17) & 0x7FFF,
            (addr >> 2) & 0x7FFF,
            ((addr >> 1) & 1) as u8,
        );
    })?;
    Ok(ev)
}

/// Calls `event(bytes, overflow)` for every polarity event of the packets after the header,
/// checking each packet's header and length first.
fn walk_polarity(path: &Path, raw: &[u8], event: &mut dyn FnMut(&[u8], i64)) -> Result<()> {
    let mut p = header_len(raw);
    while p < raw.len() {
        if raw.len() - p < PACKET_HEADER {
            return Err(DataError::format(
                path,
                p as u64,
                format!(
                    "truncated packet header: {} of {PACKET_HEADER} bytes",
                    raw.len() - p
                ),
            ));
        }
        let h = &raw[p..p + PACKET_HEADER];
        let kind = u16::from_le_bytes([h[0], h[1]]);
        let size = u32_at(h, 4) as usize;
        // the overflow counter is a u32: shifted by 31 it stays below 2^63
        let overflow = i64::from(u32_at(h, 12));
        let capacity = u32_at(h, 16) as usize;
        let len = capacity.checked_mul(size).ok_or_else(|| {
            DataError::format(
                path,
                p as u64,
                format!("packet of {capacity} events of {size} bytes is too large"),
            )
        })?;
        let data_start = p + PACKET_HEADER;
        if raw.len() - data_start < len {
            return Err(DataError::format(
                path,
                data_start as u64,
                format!(
                    "truncated packet: {capacity} events of {size} bytes need {len} bytes, {} remain",
                    raw.len() - data_start
                ),
            ));
        }
        if kind == POLARITY_EVENT {
            if size < 8 {
                return Err(DataError::format(
                    path,
                    p as u64 + 4,
                    format!("polarity events need at least 8 bytes, the packet says {size}"),
                ));
            }
            for e in raw[data_start..data_start + len].chunks_exact(size) {
                event(e, overflow);
            }
        }
        p = data_start + len;
    }
    Ok(())
}

/// The header ends after the line `#!END-HEADER\r\n`, or at the first line not starting with
/// `#`.
fn header_len(raw: &[u8]) -> usize {
    let mut p = 0;
    while p < raw.len() && raw[p] == b'#' {
        let end = raw[p..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(raw.len(), |i| p + i + 1);
        let line = &raw[p..end];
        p = end;
        if line == b"#!END-HEADER\r\n" {
            break;
        }
    }
    p
}

/// One labelled sample of a recording: its class (0-based) and index among the samples of that
/// class in this recording (SpikingJelly names the file `{recording}_{index}.npz`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledSample {
    /// Class, 0-based (the CSV's classes are 1-based).
    pub class: usize,
    /// Index among this recording's samples of the same class.
    pub index: usize,
    /// The events with `start <= t < end`.
    pub events: Events,
}

/// Cuts `events` by a DVS128 Gesture labels CSV (`class,startTime_usec,endTime_usec` with a
/// header line; classes 1..=`classes`). A CSV labelling no sample, or a line whose start is not
/// before its end, is an error naming the file and line.
pub fn split_by_labels(events: &Events, csv_path: &Path, classes: usize) -> Result<Vec<LabelledSample>> {
    let text = memopt_core::input_file::read_bounded_text(csv_path, crate::error::MAX_DATA_FILE_BYTES)
        .map_err(|e| crate::error::input_error(csv_path, e))?;
    let mut counts = vec![0usize; classes];
    let mut out = Vec::new();
    for (line_no, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |m: &str| DataError::file(csv_path, format!("line {}: {m}: '{line}'", line_no + 1));
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [class, start, end] = fields[..] else {
            return Err(bad("expected 3 fields class,startTime_usec,endTime_usec"));
        };
        let num = |s: &str| s.parse::<u32>().map_err(|_| bad("expected unsigned integers"));
        let (class, start, end) = (num(class)? as usize, num(start)?, num(end)?);
        if class == 0 || class > classes {
            return Err(bad(&format!("class must be in 1..={classes}")));
        }
        if start >= end {
            return Err(bad("the start time must be before the end time"));
        }
        let c = class - 1;
        out.push(LabelledSample {
            class: c,
            index: counts[c],
            events: events.time_window(i64::from(start), i64::from(end))?,
        });
        counts[c] += 1;
    }
    if out.is_empty() {
        return Err(DataError::file(
            csv_path,
            "labels no sample: expected a header line, then lines class,startTime_usec,endTime_usec",
        ));
    }
    Ok(out)
}
