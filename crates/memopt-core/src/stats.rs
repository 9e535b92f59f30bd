//! Summary statistics of measured samples (timings in ms or s).

/// Median of `v` (mean of the two middle values for an even count); 0 for none. Samples are
/// ordered with `f64::total_cmp`, so a NaN sorts last instead of panicking.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}
