//! Byte counts for people: the one way every crate prints them.

/// `bytes` in binary units with two decimals (`1.50 MiB`); plain bytes below 1 KiB.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    #[test]
    fn units() {
        assert_eq!(super::bytes(1023), "1023 B");
        assert_eq!(super::bytes(1536), "1.50 KiB");
        assert_eq!(super::bytes(3 * 1024 * 1024), "3.00 MiB");
        assert_eq!(super::bytes(u64::MAX), "16.00 EiB");
    }
}
