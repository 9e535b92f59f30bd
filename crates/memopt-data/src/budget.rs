//! The memory the data path may hold at once, checked before anything is allocated, and the
//! fallible allocations it makes.
//!
//! A few bytes of input can ask for any amount of memory: two events hours apart integrated
//! into 1 µs frames, a frame count or sensor size from the command line, an archive entry that
//! inflates a thousandfold. The data path predicts each such allocation from checked
//! arithmetic, compares it with its [`MemoryBudget`] and refuses it with both figures; what
//! passes is still allocated fallibly, so a failure is an error, never an abort.

use crate::error::{DataError, Result};
use memopt_core::units;

/// The bytes the data path may hold at once, and where the figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBudget {
    bytes: Option<u64>,
    source: String,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget::unlimited()
    }
}

impl MemoryBudget {
    /// No limit beyond what the allocator serves (allocations still fail cleanly).
    pub fn unlimited() -> MemoryBudget {
        MemoryBudget {
            bytes: None,
            source: String::new(),
        }
    }

    /// At most `bytes` at once; `source` says where the figure comes from (`--memory-limit
    /// 6GiB`, `cgroup v2 memory.max ...`), for the error.
    pub fn new(bytes: u64, source: impl Into<String>) -> MemoryBudget {
        MemoryBudget {
            bytes: Some(bytes),
            source: source.into(),
        }
    }

    /// The limit in bytes (`None`: unlimited).
    pub fn bytes(&self) -> Option<u64> {
        self.bytes
    }

    /// This budget less `bytes` held elsewhere (a batch, a training step), or an error naming
    /// `what` holds them when they alone exceed it.
    pub fn less(&self, bytes: u64, what: &str) -> Result<MemoryBudget> {
        match self.bytes {
            None => Ok(self.clone()),
            Some(b) if bytes <= b => Ok(MemoryBudget {
                bytes: Some(b - bytes),
                source: format!("{} less {} for {what}", self.source, units::bytes(bytes)),
            }),
            Some(_) => Err(self.refusal(bytes, what.to_string())),
        }
    }

    /// Refuses `need` bytes for `what` (e.g. `frames [8400000, 2, 34, 34] of f32`) when they
    /// exceed the budget.
    pub fn check(&self, need: u64, what: impl FnOnce() -> String) -> Result<()> {
        match self.bytes {
            Some(b) if need > b => Err(self.refusal(need, what())),
            _ => Ok(()),
        }
    }

    fn refusal(&self, need: u64, what: String) -> DataError {
        DataError::Memory {
            what,
            need_bytes: need,
            limit_bytes: self.bytes.unwrap_or(u64::MAX),
            limit_from: self.source.clone(),
        }
    }
}

/// Bytes of `n` values of `T`, or an error naming `what` when that exceeds 2^64 - 1.
pub(crate) fn bytes_of<T>(n: usize, what: &str) -> Result<u64> {
    (n as u64)
        .checked_mul(size_of::<T>() as u64)
        .ok_or_else(|| DataError::Invalid(format!("{what}: {n} values exceed 2^64 - 1 bytes")))
}

/// `n` copies of `value`, allocated fallibly (an out-of-memory error, never an abort).
pub(crate) fn filled<T: Clone>(n: usize, value: T) -> Result<Vec<T>> {
    let mut v = memopt_core::host_vec_with_capacity(n)?;
    v.resize(n, value);
    Ok(v)
}

/// An empty vector with room for `n` values, allocated fallibly.
pub(crate) fn with_capacity<T>(n: usize) -> Result<Vec<T>> {
    Ok(memopt_core::host_vec_with_capacity(n)?)
}

/// The values of `iter` (of exactly `n` items), allocated fallibly.
pub(crate) fn collect<T>(n: usize, iter: impl IntoIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = with_capacity(n)?;
    v.extend(iter);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_refuses_what_exceeds_it_and_names_both_figures() {
        let b = MemoryBudget::new(1000, "--memory-limit 1000");
        b.check(1000, || unreachable!()).unwrap();
        let e = b
            .check(1001, || "frames [1, 2, 3, 4]".into())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("frames [1, 2, 3, 4]") && e.contains("1001") && e.contains("1000"),
            "{e}"
        );
        let rest = b.less(400, "a batch").unwrap();
        assert_eq!(rest.bytes(), Some(600));
        assert!(b.less(1001, "a batch").is_err());
        MemoryBudget::unlimited()
            .check(u64::MAX, || unreachable!())
            .unwrap();
        assert!(bytes_of::<f32>(usize::MAX, "x").is_err());
        assert!(filled(usize::MAX / 2, 0f32).is_err());
    }
}
