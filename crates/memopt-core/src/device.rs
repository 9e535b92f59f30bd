//! Devices a tensor can live on.

use crate::backend::Target;
use serde::{Deserialize, Serialize};

/// Where a tensor's storage lives.
///
/// - `Cpu`: host memory; the CPU backend computes every op.
/// - `Meta(target)`: shape and dtype only. Ops compute nothing but allocate and free exactly as
///   on `target` (workspace sizes are the target's), so a step on Meta yields the exact peak of
///   the real step on that target, on any machine.
/// - `Cuda(ordinal)`: GPU memory through cudarc; a clear error when no driver or device exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Host memory.
    Cpu,
    /// Shape-only device used for exact memory estimation, reproducing a target's allocations.
    Meta(Target),
    /// A CUDA GPU by ordinal.
    Cuda(usize),
}

impl Device {
    /// The Meta device that reproduces the CPU's allocations (the planning default).
    pub const META: Device = Device::Meta(Target::Cpu);

    /// Whether this is a Meta device (of any target).
    pub fn is_meta(self) -> bool {
        matches!(self, Device::Meta(_))
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// Whose workspace rules ops on this device follow: the device's own, or the target a Meta
    /// device stands in for.
    pub fn target(self) -> Target {
        match self {
            Device::Cpu => Target::Cpu,
            Device::Meta(target) => target,
            Device::Cuda(_) => Target::Cuda,
        }
    }

    /// The Meta device that plans for this device's allocations.
    pub fn meta(self) -> Device {
        Device::Meta(self.target())
    }

    /// Where this device's offloaded tensors go: the CPU for a GPU, and Meta of the CPU for
    /// Meta of a GPU (a tracker of its own, so that offloaded bytes leave the planned device's
    /// figures as they leave a GPU's); the device itself for the CPU and Meta of the CPU,
    /// whose memory is the host's.
    pub fn host(self) -> Device {
        match self {
            Device::Cuda(_) => Device::Cpu,
            Device::Meta(Target::Cuda) => Device::Meta(Target::Cpu),
            Device::Cpu | Device::Meta(Target::Cpu) => self,
        }
    }

    /// Whether host memory is separate from this device's ([`Device::host`] is another
    /// device): offloading then frees this device's memory.
    pub fn has_separate_host(self) -> bool {
        self.host() != self
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Meta(Target::Cpu) => f.write_str("meta"),
            Device::Meta(target) => write!(f, "meta:{target}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    /// Parses `cpu`, `meta` (for the CPU target), `meta:cpu`, `meta:cuda`, `cuda` (ordinal 0)
    /// or `cuda:N`.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || format!("unknown device '{s}': valid devices are cpu, meta, meta:cuda, cuda, cuda:N");
        match s {
            "cpu" => Ok(Device::Cpu),
            "meta" | "meta:cpu" => Ok(Device::META),
            "meta:cuda" => Ok(Device::Meta(Target::Cuda)),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_carries_its_target_through_display_and_parse() {
        for d in [
            Device::Cpu,
            Device::META,
            Device::Meta(Target::Cuda),
            Device::Cuda(1),
        ] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
        assert_eq!(Device::META.to_string(), "meta");
        assert_eq!(Device::Cuda(0).meta(), Device::Meta(Target::Cuda));
        assert_eq!(Device::Cpu.meta(), Device::META);
        let e = "meta:tpu".parse::<Device>().unwrap_err();
        assert!(e.contains("meta:cuda"), "{e}");
    }
}
