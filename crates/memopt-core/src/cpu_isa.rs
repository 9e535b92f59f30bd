//! The vector instruction sets the CPU kernels choose among at run time.
//!
//! Every hot CPU kernel has a portable path and, on x86-64, AVX2 and AVX-512 paths. Each path
//! computes every output element as the same chain of IEEE operations, so **all paths give the
//! same bits**; the choice changes speed only. The kernels run the widest path the CPU has,
//! capped by the environment variable `MEMOPT_CPU_ISA` (`portable`, `avx2` or `avx512`), read
//! once per process. A cap is how a benchmark compares paths on one machine.

use crate::{CoreError, Result};
use std::sync::OnceLock;

/// The environment variable that caps the instruction set the CPU kernels use.
pub const CPU_ISA_VAR: &str = "MEMOPT_CPU_ISA";

/// A vector instruction set a CPU kernel path is written for, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuIsa {
    /// Plain Rust, every CPU.
    Portable,
    /// AVX2 with FMA (x86-64).
    Avx2,
    /// AVX-512 Foundation, with AVX2 and FMA (x86-64).
    Avx512,
}

impl CpuIsa {
    /// Every path, narrowest first.
    pub const ALL: [CpuIsa; 3] = [CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512];

    /// The name `MEMOPT_CPU_ISA` takes and benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            CpuIsa::Portable => "portable",
            CpuIsa::Avx2 => "avx2",
            CpuIsa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU runs the path.
    pub fn available(self) -> bool {
        match self {
            CpuIsa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            CpuIsa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            CpuIsa::Avx512 => CpuIsa::Avx2.available() && std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest path this CPU runs.
    pub fn widest() -> CpuIsa {
        CpuIsa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.available())
            .unwrap_or(CpuIsa::Portable)
    }

    /// The path the kernels use: [`CpuIsa::widest`], capped by `MEMOPT_CPU_ISA` when it is set
    /// to a valid name this CPU runs. Decided once per process; an invalid cap is ignored here
    /// (the command-line tool refuses it up front through [`CpuIsa::from_env`]).
    pub fn selected() -> CpuIsa {
        static SELECTED: OnceLock<CpuIsa> = OnceLock::new();
        *SELECTED.get_or_init(|| CpuIsa::from_env().ok().flatten().unwrap_or_else(CpuIsa::widest))
    }

    /// The cap `MEMOPT_CPU_ISA` sets: `None` when unset or empty, an error naming the valid
    /// values when it names no path or one this CPU lacks.
    pub fn from_env() -> Result<Option<CpuIsa>> {
        match std::env::var(CPU_ISA_VAR) {
            Ok(v) if !v.trim().is_empty() => CpuIsa::parse(&v).map(Some),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(CpuIsa::invalid("a value that is not UTF-8")),
        }
    }

    /// The path named `name` (case-insensitive), if this CPU runs it.
    pub fn parse(name: &str) -> Result<CpuIsa> {
        let wanted = CpuIsa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| CpuIsa::invalid(&format!("'{name}'")))?;
        if wanted.available() {
            Ok(wanted)
        } else {
            Err(CpuIsa::invalid(&format!("'{name}', which this CPU lacks")))
        }
    }

    fn invalid(what: &str) -> CoreError {
        let valid: Vec<&str> = CpuIsa::ALL
            .into_iter()
            .filter(|isa| isa.available())
            .map(CpuIsa::name)
            .collect();
        CoreError::InvalidArgument {
            op: CPU_ISA_VAR,
            message: format!(
                "{CPU_ISA_VAR} is {what}; valid on this CPU: {} (or unset for the widest)",
                valid.join(", ")
            ),
        }
    }
}

impl std::fmt::Display for CpuIsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_refused() {
        for isa in CpuIsa::ALL.into_iter().filter(|i| i.available()) {
            assert_eq!(CpuIsa::parse(isa.name()).unwrap(), isa);
            assert_eq!(CpuIsa::parse(&isa.name().to_uppercase()).unwrap(), isa);
        }
        let err = CpuIsa::parse("sse9").unwrap_err().to_string();
        assert!(err.contains("'sse9'") && err.contains("portable"), "{err}");
        assert!(CpuIsa::widest().available());
        assert!(CpuIsa::selected().available());
    }

    #[test]
    fn a_path_the_cpu_lacks_is_refused() {
        match CpuIsa::ALL.into_iter().find(|i| !i.available()) {
            Some(missing) => {
                let err = CpuIsa::parse(missing.name()).unwrap_err().to_string();
                assert!(err.contains("lacks"), "{err}");
            }
            None => eprintln!("skipped: this CPU runs every path, none to refuse"),
        }
    }
}
