//! Event streams: `(t, x, y, p)` arrays as SpikingJelly's readers return them, and SpikingJelly's
//! own `events_np` archives of them.

use crate::budget::{MemoryBudget, with_capacity};
use crate::error::{DataError, Result};
use crate::npz;
use std::path::Path;

/// Events of one recording, in file order. `t` in microseconds, `p` 0 (OFF) or 1 (ON).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events {
    /// Timestamps (µs).
    pub t: Vec<i64>,
    /// Column of each event.
    pub x: Vec<u32>,
    /// Row of each event.
    pub y: Vec<u32>,
    /// Polarity of each event (0 or 1).
    pub p: Vec<u8>,
}

impl Events {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// Bytes the events hold (17 per event: `t`, `x`, `y`, `p`).
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * 17
    }

    /// Room for `n` events, allocated fallibly (17 bytes per event).
    pub fn with_capacity(n: usize) -> Result<Events> {
        Ok(Events {
            t: with_capacity(n)?,
            x: with_capacity(n)?,
            y: with_capacity(n)?,
            p: with_capacity(n)?,
        })
    }

    /// Appends one event.
    pub fn push(&mut self, t: i64, x: u32, y: u32, p: u8) {
        self.t.push(t);
        self.x.push(x);
        self.y.push(y);
        self.p.push(p);
    }

    /// The events with `start <= t < end`, in order (how SpikingJelly cuts DVS128 Gesture
    /// recordings into samples).
    pub fn time_window(&self, start: i64, end: i64) -> Result<Events> {
        let inside = |i: &usize| self.t[*i] >= start && self.t[*i] < end;
        let mut out = Events::with_capacity((0..self.len()).filter(inside).count())?;
        for i in (0..self.len()).filter(inside) {
            out.push(self.t[i], self.x[i], self.y[i], self.p[i]);
        }
        Ok(out)
    }
}

/// `n` events of `path` fit `budget` beside `held` bytes already read: checked before they are
/// allocated.
pub(crate) fn check_events(path: &Path, n: usize, held: u64, budget: &MemoryBudget) -> Result<()> {
    let need = (n as u64).saturating_mul(17).saturating_add(held);
    budget.check(need, || format!("{n} events of {}", path.display()))
}

/// Reads SpikingJelly's `events_np` file: arrays `t`, `x`, `y`, `p` of one length.
pub fn read_events_npz(path: &Path) -> Result<Events> {
    read_events_npz_within(path, &MemoryBudget::unlimited())
}

/// [`read_events_npz`] within `budget` (the archive's entries, then the events).
pub fn read_events_npz_within(path: &Path, budget: &MemoryBudget) -> Result<Events> {
    let arrays = npz::read_within(path, budget)?;
    let held: u64 = arrays.iter().map(|(_, a)| a.bytes()).sum();
    let get = |k: &str| -> Result<Vec<i64>> {
        arrays
            .iter()
            .find(|(n, _)| n == k)
            .ok_or_else(|| {
                DataError::file(
                    path,
                    format!("no array '{k}': an events file holds t, x, y and p"),
                )
            })?
            .1
            .to_i64(path, k)
    };
    let (t, x, y, p) = (get("t")?, get("x")?, get("y")?, get("p")?);
    if x.len() != t.len() || y.len() != t.len() || p.len() != t.len() {
        return Err(DataError::file(
            path,
            format!(
                "t, x, y, p must have one length, got {}, {}, {}, {}",
                t.len(),
                x.len(),
                y.len(),
                p.len()
            ),
        ));
    }
    let coord = |v: i64, k: &str| {
        u32::try_from(v).map_err(|_| DataError::file(path, format!("{k} = {v} is not a pixel coordinate")))
    };
    check_events(path, t.len(), held, budget)?;
    let mut ev = Events::with_capacity(t.len())?;
    for i in 0..t.len() {
        ev.push(t[i], coord(x[i], "x")?, coord(y[i], "y")?, u8::from(p[i] != 0));
    }
    Ok(ev)
}
