//! Devices a tensor can live on.

use serde::{Deserialize, Serialize};

/// Where a tensor's storage lives.
///
/// - `Cpu`: host memory; every kernel runs here.
/// - `Meta`: shape and dtype only. Kernels compute nothing but allocate and free exactly as on
///   the CPU, so a step on Meta yields the exact peak of the real step.
/// - `Cuda(ordinal)`: GPU memory through cudarc; a clear error when no driver or device exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Host memory.
    Cpu,
    /// Shape-only device used for exact memory estimation.
    Meta,
    /// A CUDA GPU by ordinal.
    Cuda(usize),
}

impl Device {
    /// Whether this is the Meta device.
    pub fn is_meta(self) -> bool {
        matches!(self, Device::Meta)
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Meta => f.write_str("meta"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    /// Parses `cpu`, `meta`, `cuda` (ordinal 0) or `cuda:N`.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || format!("unknown device '{s}': valid devices are cpu, meta, cuda, cuda:N");
        match s {
            "cpu" => Ok(Device::Cpu),
            "meta" => Ok(Device::Meta),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(bad),
        }
    }
}
