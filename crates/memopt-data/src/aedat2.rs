//! CIFAR10-DVS's jAER AEDAT 2 files, read as SpikingJelly's `cifar10_dvs._load_origin_data`
//! does: `#` header lines, then big-endian `u32` pairs (address, timestamp µs). The address
//! holds polarity in bit 0, a 7-bit column in bits 1..8 and a 7-bit row in bits 8..15; events
//! come out as `x = 127 - row`, `y = 127 - column`, `p = 1 - polarity`.

use crate::budget::MemoryBudget;
use crate::error::{DataError, Result, read_all_within};
use crate::events::{Events, check_events};
use std::path::Path;

/// Reads an AEDAT 2 file.
pub fn read(path: &Path) -> Result<Events> {
    read_within(path, &MemoryBudget::unlimited())
}

/// [`read`] within `budget` (see [`crate::EventFormat::read_within`]).
pub fn read_within(path: &Path, budget: &MemoryBudget) -> Result<Events> {
    let raw = read_all_within(path, budget)?;
    let start = header_len(&raw);
    let body = &raw[start..];
    if body.len() % 8 != 0 {
        let whole = body.len() / 8 * 8;
        return Err(DataError::format(
            path,
            (start + whole) as u64,
            format!(
                "truncated event: AEDAT 2 events are 8 bytes (address, timestamp), the last one has {}",
                body.len() - whole
            ),
        ));
    }
    check_events(path, body.len() / 8, raw.len() as u64, budget)?;
    let mut ev = Events::with_capacity(body.len() / 8)?;
    for e in body.chunks_exact(8) {
        // chunks_exact(8) guarantees both 4-byte halves exist.
        let addr = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
        let t = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
        let col = (addr & 0xFE) >> 1;
        let row = (addr & 0x7F00) >> 8;
        ev.push(i64::from(t), 127 - row, 127 - col, (1 - (addr & 1)) as u8);
    }
    Ok(ev)
}

/// Length of the header as SpikingJelly's `_skip_header` measures it: consecutive lines that
/// decode as UTF-8 and start with `#` once stripped of surrounding whitespace.
pub(crate) fn header_len(raw: &[u8]) -> usize {
    let mut p = 0;
    while p < raw.len() {
        let end = raw[p..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(raw.len(), |i| p + i + 1);
        let is_header = std::str::from_utf8(&raw[p..end])
            .map(|l| l.trim().starts_with('#'))
            .unwrap_or(false);
        if !is_header {
            break;
        }
        p = end;
    }
    p
}
