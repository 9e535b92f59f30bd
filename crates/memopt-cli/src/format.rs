//! Numbers for people: bytes in binary units, fractions as percentages, durations.

pub use memopt_profiler::format::{bytes, path};

/// `bytes` in MiB as a number (for charts).
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// A fraction as a signed percentage with one decimal (`+12.8%`).
pub fn percent(fraction: f64) -> String {
    format!("{:+.1}%", fraction * 100.0)
}

/// `YYYY-MM-DD` (UTC) of `secs` seconds since the Unix epoch (Howard Hinnant's
/// civil-from-days algorithm).
pub fn utc_date(secs: u64) -> String {
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14");
        assert_eq!(utc_date(4_107_456_000), "2100-02-28");
    }

    #[test]
    fn units() {
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
        assert_eq!(percent(0.128), "+12.8%");
        assert_eq!(percent(-0.05), "-5.0%");
        assert_eq!(path(""), "(root)");
    }
}
