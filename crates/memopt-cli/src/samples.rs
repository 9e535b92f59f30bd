//! Per-step figures of a long run kept in bounded memory: evenly spaced samples.

/// Samples kept at most by [`StepSamples`].
pub const MAX_SAMPLES: usize = 1000;

/// Values of every `every`-th step of a run of `total` steps (the first step included), at most
/// [`MAX_SAMPLES`] of them, in a buffer allocated once: a run of any length holds the same
/// memory.
#[derive(Debug, Clone)]
pub struct StepSamples<T> {
    every: usize,
    values: Vec<T>,
}

impl<T> StepSamples<T> {
    /// Room for the samples of a run of `total` steps.
    pub fn new(total: usize) -> Self {
        let every = total.div_ceil(MAX_SAMPLES).max(1);
        StepSamples {
            every,
            values: Vec::with_capacity(total.div_ceil(every).min(MAX_SAMPLES)),
        }
    }

    /// Offers the value of step `step` (counted from 0); kept when the step is sampled.
    pub fn offer(&mut self, step: usize, value: T) {
        if step.is_multiple_of(self.every) && self.values.len() < self.values.capacity() {
            self.values.push(value);
        }
    }

    /// Steps between two samples.
    pub fn every(&self) -> usize {
        self.every
    }

    /// The samples, in step order.
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// The samples, consumed.
    pub fn into_values(self) -> Vec<T> {
        self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_bounded_and_evenly_spaced() {
        for total in [1, 7, 999, 1000, 1001, 123_457] {
            let mut s = StepSamples::new(total);
            let cap = s.values.capacity();
            for step in 0..total {
                s.offer(step, step);
            }
            assert!(s.values().len() <= MAX_SAMPLES, "{total}");
            assert_eq!(s.values.capacity(), cap, "{total}: the buffer never grows");
            assert_eq!(s.values()[0], 0);
            assert!(s.values().windows(2).all(|w| w[1] - w[0] == s.every()), "{total}");
            assert_eq!(s.values().len(), total.div_ceil(s.every()), "{total}");
        }
    }
}
