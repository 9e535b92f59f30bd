//! Human-readable numbers for the report tables.

pub use memopt_core::units::bytes;

/// `n` and the noun in the right number: `1 entry`, `3 entries`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A module path for tables: `(root)` for the empty path.
pub fn path(p: &str) -> &str {
    if p.is_empty() { "(root)" } else { p }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_root_is_named() {
        assert_eq!(super::path(""), "(root)");
    }
}
