//! N-MNIST's ATIS `.bin` files, read as SpikingJelly's `load_ATIS_bin` does: 5 bytes per event,
//! `x`, `y`, then polarity in bit 7 and a 23-bit timestamp (µs) in big-endian order.

use crate::error::{DataError, Result, read_all};
use crate::events::Events;
use std::path::Path;

/// Bytes per event.
const EVENT_BYTES: usize = 5;

/// Reads an ATIS `.bin` file. A file whose length is not a multiple of 5 bytes ends in a
/// truncated event: that is an error naming the offset of the partial event.
pub fn read(path: &Path) -> Result<Events> {
    let raw = read_all(path)?;
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
    let mut ev = Events::default();
    for e in raw.chunks_exact(EVENT_BYTES) {
        let t = (i64::from(e[2] & 0x7F) << 16) | (i64::from(e[3]) << 8) | i64::from(e[4]);
        ev.push(t, u32::from(e[0]), u32::from(e[1]), e[2] >> 7);
    }
    Ok(ev)
}
