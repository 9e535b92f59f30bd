//! GPU time from CUDA events: marks recorded on a GPU's one stream, read back as milliseconds
//! since the first mark once the GPU has reached the last one.

use crate::{CoreError, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

/// A sequence of timing events on GPU `ordinal`'s stream. [`EventClock::mark`] records one
/// where the host is in its queue of work; [`EventClock::elapsed_ms`] waits for the last and
/// gives each mark's time on the GPU, in ms after the first mark. Marks measure when the GPU
/// reached that point of the queue, not when the host queued it.
#[derive(Debug)]
pub struct EventClock {
    stream: Arc<CudaStream>,
    events: Vec<CudaEvent>,
}

fn cuda_err(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CoreError {
    move |e| CoreError::Cuda {
        op,
        message: e.to_string(),
    }
}

impl EventClock {
    /// A clock on GPU `ordinal`'s stream, with no marks.
    pub fn new(ordinal: usize) -> Result<EventClock> {
        Ok(EventClock {
            stream: super::stream(ordinal)?,
            events: Vec::new(),
        })
    }

    /// Records a mark at this point of the stream's queue and returns its index.
    pub fn mark(&mut self) -> Result<usize> {
        let event = self
            .stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err("creating a CUDA timing event"))?;
        event
            .record(&self.stream)
            .map_err(cuda_err("recording a CUDA timing event"))?;
        self.events.push(event);
        Ok(self.events.len() - 1)
    }

    /// Number of marks.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no mark was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Each mark's time in ms after the first (the first is 0), once the GPU has passed the
    /// last mark (this waits for it).
    pub fn elapsed_ms(&self) -> Result<Vec<f64>> {
        let (Some(first), Some(last)) = (self.events.first(), self.events.last()) else {
            return Ok(Vec::new());
        };
        last.synchronize()
            .map_err(cuda_err("waiting for a CUDA timing event"))?;
        self.events
            .iter()
            .map(|e| {
                first
                    .elapsed_ms(e)
                    .map(f64::from)
                    .map_err(cuda_err("reading a CUDA event's time"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_ordered_on_a_gpu_and_an_error_without_one() {
        if !matches!(crate::cuda_device_count(), Ok(n) if n > 0) {
            let e = EventClock::new(0).unwrap_err();
            assert!(
                matches!(
                    e,
                    CoreError::CudaUnavailable { .. } | CoreError::CudaDeviceNotFound { .. }
                ),
                "{e}"
            );
            return;
        }
        let mut clock = EventClock::new(0).unwrap();
        assert!(clock.elapsed_ms().unwrap().is_empty());
        for _ in 0..3 {
            clock.mark().unwrap();
        }
        let t = clock.elapsed_ms().unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0], 0.0);
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
    }
}
