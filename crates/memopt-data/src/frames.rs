//! Integrating events into frames exactly as SpikingJelly 2.0 does
//! (`spikingjelly.datasets.utils`): a frame is two channels (polarity 0, 1) of event counts
//! per pixel, over index ranges chosen by a fixed frame number (split by event count or by
//! time) or by a fixed duration.

use crate::budget::{MemoryBudget, bytes_of, collect, filled, with_capacity};
use crate::error::{DataError, Result};
use crate::events::Events;

/// How events are split into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSpec {
    /// `frames_number` frames of `N / frames` events each (the last takes the rest).
    Number {
        /// Frames per sample.
        frames: usize,
        /// Split by event count or by time.
        split_by: SplitBy,
    },
    /// One frame per `duration_us` microseconds (a variable number of frames).
    Duration {
        /// Frame length (µs).
        duration_us: i64,
    },
}

/// How a fixed number of frames divides a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitBy {
    /// Equal event counts (`split_by='number'`).
    Number,
    /// Equal time spans (`split_by='time'`).
    Time,
}

impl FrameSpec {
    /// SpikingJelly's cache folder for these frames: `frames_number_{T}_split_by_{number|time}`
    /// or `duration_{d}`.
    pub fn folder_name(&self) -> String {
        match self {
            FrameSpec::Number { frames, split_by } => format!(
                "frames_number_{frames}_split_by_{}",
                match split_by {
                    SplitBy::Number => "number",
                    SplitBy::Time => "time",
                }
            ),
            FrameSpec::Duration { duration_us } => format!("duration_{duration_us}"),
        }
    }
}

/// Frames `[T, 2, H, W]` of event counts (exact integers in `f32`).
#[derive(Debug, Clone, PartialEq)]
pub struct Frames {
    /// `[T, 2, H, W]`.
    pub dims: [usize; 4],
    /// Counts in row-major order.
    pub data: Vec<f32>,
}

impl Frames {
    /// Bytes of the values (`f32`).
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * 4
    }
}

/// Integrates `events` on an `h` x `w` sensor. Coordinates outside the sensor are an error
/// (SpikingJelly would silently count them at a wrong pixel). Memory is allocated fallibly; see
/// [`integrate_within`] to bound it.
pub fn integrate(events: &Events, spec: FrameSpec, h: usize, w: usize) -> Result<Frames> {
    integrate_within(events, spec, h, w, &MemoryBudget::unlimited())
}

/// [`integrate`], refusing before anything is allocated when the frames and their index would
/// exceed `budget`: the frame count follows from the spec and the timestamps (checked
/// arithmetic), so two events hours apart in 1 µs frames are refused, not allocated.
pub fn integrate_within(
    events: &Events,
    spec: FrameSpec,
    h: usize,
    w: usize,
    budget: &MemoryBudget,
) -> Result<Frames> {
    if let Some(i) = (0..events.len()).find(|&i| events.x[i] as usize >= w || events.y[i] as usize >= h) {
        return Err(DataError::Invalid(format!(
            "event {i} at x={}, y={} lies outside the {h}x{w} sensor (H x W)",
            events.x[i], events.y[i]
        )));
    }
    if events.is_empty() {
        return Err(DataError::Invalid("no events to integrate into frames".into()));
    }
    let t_frames = frame_count(&events.t, spec)?;
    let dims = [t_frames, 2, h, w];
    let values = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| DataError::Invalid(format!("frames {dims:?} have more values than fit in memory")))?;
    // the frames, their index ranges and (by duration) each event's frame index
    let need = [
        bytes_of::<f32>(values, "frames")?,
        bytes_of::<(usize, usize)>(t_frames, "frame ranges")?,
        // splitting by time finds each frame's first and last event first
        bytes_of::<Option<(usize, usize)>>(t_frames, "frame bounds")?,
        bytes_of::<u64>(events.len(), "frame indices")?,
    ]
    .iter()
    .try_fold(0u64, |a, &b| a.checked_add(b))
    .ok_or_else(|| DataError::Invalid(format!("frames {dims:?} exceed 2^64 - 1 bytes")))?;
    budget.check(need, || {
        format!("integrating {} events into frames {dims:?} of f32", events.len())
    })?;
    let ranges = match spec {
        FrameSpec::Number { frames, split_by } => number_ranges(&events.t, split_by, frames)?,
        FrameSpec::Duration { duration_us } => duration_ranges(&events.t, duration_us, t_frames)?,
    };
    let plane = 2 * h * w;
    let mut data = filled(values, 0f32)?;
    for (f, (l, r)) in ranges.into_iter().enumerate() {
        let frame = &mut data[f * plane..(f + 1) * plane];
        for i in l..r {
            let c = usize::from(events.p[i] != 0);
            frame[c * h * w + events.y[i] as usize * w + events.x[i] as usize] += 1.0;
        }
    }
    Ok(Frames { dims, data })
}

/// The number of frames `spec` makes of timestamps `t` (not empty), from checked arithmetic:
/// any `i64` timestamps and durations give the count or an error, never an overflow.
pub fn frame_count(t: &[i64], spec: FrameSpec) -> Result<usize> {
    match spec {
        FrameSpec::Number { frames: 0, .. } => Err(DataError::Invalid(
            "the number of frames must be at least 1".into(),
        )),
        FrameSpec::Number { frames, .. } => Ok(frames),
        FrameSpec::Duration { duration_us } => {
            if duration_us <= 0 {
                return Err(DataError::Invalid(format!(
                    "frame duration must be at least 1 µs, got {duration_us}"
                )));
            }
            let (t_min, span) = duration_span(t)?;
            // ceil(span / duration) in i128: no i64 timestamps overflow it
            let frames = (span + i128::from(duration_us) - 1).div_euclid(i128::from(duration_us));
            if frames <= 0 {
                return Err(DataError::Invalid(format!(
                    "the last event is at the earliest time ({t_min} µs), so fixed-duration integration \
                     gives no frame (SpikingJelly fails here too)"
                )));
            }
            usize::try_from(frames).map_err(|_| {
                DataError::Invalid(format!(
                    "{span} µs of events in frames of {duration_us} µs are {frames} frames, more than fit in memory"
                ))
            })
        }
    }
}

/// The earliest timestamp and the span from it to the last event's (µs, exact in `i128`).
fn duration_span(t: &[i64]) -> Result<(i64, i128)> {
    let (Some(&t_min), Some(&last)) = (t.iter().min(), t.last()) else {
        return Err(DataError::Invalid("no events to integrate into frames".into()));
    };
    Ok((t_min, i128::from(last) - i128::from(t_min)))
}

/// `cal_fixed_frames_number_segment_index`: `[j_l, j_r)` of every frame.
fn number_ranges(t: &[i64], split_by: SplitBy, frames: usize) -> Result<Vec<(usize, usize)>> {
    let n = t.len();
    let mut ranges = with_capacity(frames)?;
    match split_by {
        SplitBy::Number => {
            let di = n / frames;
            for i in 0..frames {
                ranges.push((i * di, i * di + di));
            }
        }
        SplitBy::Time => {
            let (first, last) = (i128::from(t[0]), i128::from(t[n - 1]));
            if last < first {
                return Err(DataError::Invalid(format!(
                    "the last event (t = {last} µs) is earlier than the first (t = {first} µs): splitting \
                     by time needs events in time order; split by number"
                )));
            }
            let dt = (last - first).div_euclid(frames as i128);
            // Frame i covers [first + i dt, first + (i + 1) dt): an event's frame is
            // (t - first) / dt, and a frame's range runs from its first to its last event.
            let mut bounds: Vec<Option<(usize, usize)>> = filled(frames, None)?;
            if dt > 0 {
                for (k, &tk) in t.iter().enumerate() {
                    let off = i128::from(tk) - first;
                    if off < 0 {
                        continue;
                    }
                    let Ok(i) = usize::try_from(off / dt) else {
                        continue;
                    };
                    if let Some(b) = bounds.get_mut(i) {
                        *b = Some(b.map_or((k, k), |(l, _)| (l, k)));
                    }
                }
            }
            for (i, b) in bounds.into_iter().enumerate() {
                let Some((l, r)) = b else {
                    let t_l = first + dt * i as i128;
                    return Err(DataError::Invalid(format!(
                        "frame {i} of {frames} split by time covers [{t_l}, {}) µs, which holds no event \
                         (SpikingJelly fails here too); use fewer frames or split by number",
                        t_l + dt
                    )));
                };
                ranges.push((l, r + 1));
            }
        }
    }
    if let Some(last) = ranges.last_mut() {
        last.1 = n;
    }
    Ok(ranges)
}

/// `integrate_events_by_fixed_duration`: frame `i` holds events with
/// `(t - t_min) // duration == i`, the last frame everything from its start on; there are
/// `frames = ceil((t_last - t_min) / duration)` frames ([`frame_count`]).
fn duration_ranges(t: &[i64], duration: i64, frames: usize) -> Result<Vec<(usize, usize)>> {
    let n = t.len();
    let (t_min, _) = duration_span(t)?;
    let d = i128::from(duration);
    // every t >= t_min, so each index is below 2^64 / duration
    let index: Vec<u64> = collect(
        n,
        t.iter()
            .map(|&x| ((i128::from(x) - i128::from(t_min)) / d) as u64),
    )?;
    let mut ranges = with_capacity(frames)?;
    let mut left = 0;
    for i in 0..frames - 1 {
        // np.searchsorted(index, i + 1, side='left') on the (sorted) frame indices
        let right = index.partition_point(|&k| k < i as u64 + 1);
        ranges.push((left, right));
        left = right;
    }
    ranges.push((left, n));
    Ok(ranges)
}
