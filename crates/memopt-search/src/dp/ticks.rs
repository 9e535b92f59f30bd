//! Extra times as whole femtoseconds, so that the search adds them exactly.
//!
//! Floating-point addition is not associative: the same plan's time can differ in its last bit
//! depending on the order its segments are added in, and "the least time of what follows" would
//! not be a bound on what a prefix plus its completion adds up to. Integers are: every option's
//! extra time is rounded once to the nearest femtosecond (1e-12 ms, at most 0.5 fs off), and
//! from then on sums are exact and independent of their order. Reported times are the plan's
//! own `f64` sum ([`crate::chain::ChainModel::extra_ms`]).

use crate::chain::ChainSegment;
use crate::{Result, SearchError};

/// Femtoseconds per millisecond.
const PER_MS: f64 = 1e12;

/// Longest extra time of one option the search accepts, in ms (about 31 years): far beyond
/// any step, and small enough that sums of millions of options stay exact in 128 bits.
const MAX_MS: f64 = 1e15;

/// An extra time in whole femtoseconds.
pub(crate) type Ticks = u128;

/// `ms` as femtoseconds, rounded to the nearest; an error naming the segment when `ms` is not
/// a finite number between 0 and [`MAX_MS`].
pub(crate) fn of_option(seg: &ChainSegment, option: usize, ms: f64) -> Result<Ticks> {
    if !(0.0..=MAX_MS).contains(&ms) {
        return Err(SearchError::InvalidSetting(format!(
            "segment '{}' option {option}: an extra time must be a number of ms from 0 to {MAX_MS:e}, got {ms}",
            seg.path
        )));
    }
    Ok((ms * PER_MS).round() as Ticks)
}

/// A limit in ms as femtoseconds: the plans within `ms` are those whose ticks are at most
/// this (rounded down, so that no plan beyond the limit is let in by rounding the limit up).
/// A negative or NaN limit admits nothing (`None`); an infinite one everything.
pub(crate) fn of_limit(ms: f64) -> Option<Ticks> {
    if ms.is_nan() || ms < 0.0 {
        return None;
    }
    Some(if ms >= MAX_MS * 1e6 {
        Ticks::MAX
    } else {
        (ms * PER_MS).floor() as Ticks
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::SegmentOption;
    use memopt_checkpoint::Policy;

    fn seg() -> ChainSegment {
        ChainSegment {
            path: "features.3".into(),
            children: None,
            into_next: 0,
            span: None,
            options: vec![SegmentOption {
                policy: Policy::Store,
                forward_peak: 1,
                kept: 1,
                backward_peak: 1,
                extra_ms: 0.0,
            }],
            states: 0,
            param_grads: 0,
        }
    }

    #[test]
    fn times_round_to_femtoseconds_and_sums_are_exact() {
        let s = seg();
        assert_eq!(of_option(&s, 0, 1.0).unwrap(), 1_000_000_000_000);
        assert_eq!(of_option(&s, 0, 0.1).unwrap() * 3, of_option(&s, 0, 0.3).unwrap());
        assert_eq!(of_option(&s, 0, 2.5e-13).unwrap(), 0);
        assert_eq!(of_option(&s, 0, 7.5e-13).unwrap(), 1);
    }

    #[test]
    fn times_that_are_not_durations_name_the_segment() {
        let s = seg();
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e16] {
            let msg = of_option(&s, 0, bad).unwrap_err().to_string();
            assert!(
                msg.contains("'features.3' option 0") && msg.contains("extra time"),
                "{msg}"
            );
        }
    }

    #[test]
    fn limits_round_down() {
        assert_eq!(of_limit(1.0), Some(1_000_000_000_000));
        assert_eq!(of_limit(1.0 + 9e-13), Some(1_000_000_000_000));
        assert_eq!(of_limit(-1.0), None);
        assert_eq!(of_limit(f64::NAN), None);
        assert_eq!(of_limit(f64::INFINITY), Some(Ticks::MAX));
    }
}
