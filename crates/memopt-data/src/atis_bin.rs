//! N-MNIST's ATIS `.bin` files, read as SpikingJelly's `load_ATIS_bin` does: 5 bytes per event,
//! `x`, `y`, then polarity in bit 7 and a 23-bit timestamp (µs) in big-endian order.

use crate::budget::MemoryBudget;
use crate::error::{DataError, Result, read_all_within};
use crate::events::{Events, check_events};
use std::path::Path;

/// Bytes per event.
const EVENT_BYTES: usize = 5;

/// Reads an ATIS `.bin` file. A file whose length is not a multiple of 5 bytes ends in a
/// truncated event: that is an error naming the offset of the partial event.
pub fn read(path: &Path) -> Result<Events> {
    read_within(path, &MemoryBudget::unlimited())
}

/// [`read`] within `budget` (see [`crate::EventFormat::read_within`]).
pub fn read_within(path: &Path, budget: &MemoryBudget) -> Result<Events> {
    let raw = read_all_within(path, budget)?;
    check_events(path, raw.len() / EVENT_BYTES, raw.len() as u64, budget)?;
    parse(path, &raw)
}

pub(crate) fn parse(path: &Path, raw: &[u8]) -> Result<Events> {
    let whole = raw.len() / EVENT_BYTES * EVENT_BYTES;
    if whole != raw.len() {
        return Err(DataError::format(
            path,
            whole as u64,
            format!(
                "truncated event: ATIS events are {EVENT_BYTES} bytes, the last one has {} ({} bytes in all)",
                raw.len() - whole,
                raw.len()
            ),
        ));
    }
    let mut ev = Events::with_capacity(raw.len() / EVENT_BYTES)?;
    for e in raw.chunks_exact(EVENT_BYTES) {
        let t = (i64::from(e[2] & 0x7F) << 16) | (i64::from(e[3]) << 8) | i64::from(e[4]);
        ev.push(t, u32::from(e[0]), u32::from(e[1]), e[2] >> 7);
    }
    Ok(ev)
}

/// Encodes events as an ATIS `.bin` (the inverse of [`read`]): x, y below 256, t below 2^23 µs,
/// p 0 or 1; anything else is an error naming the event.
pub fn to_bytes(events: &Events) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(events.len() * EVENT_BYTES);
    for i in 0..events.len() {
        let (t, x, y, p) = (events.t[i], events.x[i], events.y[i], events.p[i]);
        if !(0..1 << 23).contains(&t) || x > 255 || y > 255 || p > 1 {
            return Err(DataError::Invalid(format!(
                "event {i} (t={t}, x={x}, y={y}, p={p}) does not fit ATIS' 8-bit x, y, 1-bit p and 23-bit t"
            )));
        }
        out.extend_from_slice(&[
            x as u8,
            y as u8,
            (p << 7) | ((t >> 16) as u8 & 0x7F),
            (t >> 8) as u8,
            t as u8,
        ]);
    }
    Ok(out)
}
