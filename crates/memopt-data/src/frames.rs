//! Integrating events into frames exactly as SpikingJelly 2.0 does
//! (`spikingjelly.datasets.utils`): a frame is two channels (polarity 0, 1) of event counts
//! per pixel, over index ranges chosen by a fixed frame number (split by event count or by
//! time) or by a fixed duration.

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

/// Integrates `events` on an `h` x `w` sensor. Coordinates outside the sensor are an error
/// (SpikingJelly would silently count them at a wrong pixel).
pub fn integrate(events: &Events, spec: FrameSpec, h: usize, w: usize) -> Result<Frames> {
    if let Some(i) = (0..events.len()).find(|&i| events.x[i] as usize >= w || events.y[i] as usize >= h) {
        return Err(DataError::Invalid(format!(
            "event {i} at x={}, y={} lies outside the {h}x{w} sensor (H x W)",
            events.x[i], events.y[i]
        )));
    }
    if events.is_empty() {
        return Err(DataError::Invalid("no events to integrate into frames".into()));
    }
    let ranges = match spec {
        FrameSpec::Number { frames, split_by } => number_ranges(&events.t, split_by, frames)?,
        FrameSpec::Duration { duration_us } => duration_ranges(&events.t, duration_us)?,
    };
    let plane = 2 * h * w;
    let t_frames = ranges.len();
    let mut data = vec![
        0f32;
        t_frames
            .checked_mul(plane)
            .ok_or_else(|| DataError::Invalid("frames too large".into()))?
    ];
    for (f, (l, r)) in ranges.into_iter().enumerate() {
        let frame = &mut data[f * plane..(f + 1) * plane];
        for i in l..r {
            let c = usize::from(events.p[i] != 0);
            frame[c * h * w + events.y[i] as usize * w + events.x[i] as usize] += 1.0;
        }
    }
    Ok(Frames {
        dims: [t_frames, 2, h, w],
        data,
    })
}

/// `cal_fixed_frames_number_segment_index`: `[j_l, j_r)` of every frame.
fn number_ranges(t: &[i64], split_by: SplitBy, frames: usize) -> Result<Vec<(usize, usize)>> {
    if frames == 0 {
        return Err(DataError::Invalid(
            "the number of frames must be at least 1".into(),
        ));
    }
    let n = t.len();
    let mut ranges = Vec::with_capacity(frames);
    match split_by {
        SplitBy::Number => {
            let di = n / frames;
            for i in 0..frames {
                ranges.push((i * di, i * di + di));
            }
        }
        SplitBy::Time => {
            let dt = (t[n - 1] - t[0]).div_euclid(frames as i64);
            for i in 0..frames {
                let t_l = dt * i as i64 + t[0];
                let t_r = t_l + dt;
                let inside = |k: &usize| t[*k] >= t_l && t[*k] < t_r;
                let (Some(l), Some(r)) = ((0..n).find(inside), (0..n).rev().find(inside)) else {
                    return Err(DataError::Invalid(format!(
                        "frame {i} of {frames} split by time covers [{t_l}, {t_r}) µs, which holds no event \
                         (SpikingJelly fails here too); use fewer frames or split by number"
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
/// `ceil((t_last - t_min) / duration)` frames.
fn duration_ranges(t: &[i64], duration: i64) -> Result<Vec<(usize, usize)>> {
    if duration <= 0 {
        return Err(DataError::Invalid(format!(
            "frame duration must be at least 1 µs, got {duration}"
        )));
    }
    let n = t.len();
    let t_min = *t.iter().min().unwrap_or(&0);
    let span = t[n - 1] - t_min;
    let frames = (span + duration - 1).div_euclid(duration);
    if frames <= 0 {
        return Err(DataError::Invalid(format!(
            "the last event is at the earliest time ({t_min} µs), so fixed-duration integration \
             gives no frame (SpikingJelly fails here too)"
        )));
    }
    let frames = usize::try_from(frames).map_err(|_| DataError::Invalid("too many frames".into()))?;
    let index: Vec<i64> = t.iter().map(|&x| (x - t_min).div_euclid(duration)).collect();
    let mut ranges = Vec::with_capacity(frames);
    let mut left = 0;
    for i in 0..frames - 1 {
        // np.searchsorted(index, i + 1, side='left') on the (sorted) frame indices
        let right = index.partition_point(|&k| k < i as i64 + 1);
        ranges.push((left, right));
        left = right;
    }
    ranges.push((left, n));
    Ok(ranges)
}
