//! `--device`: one spelling and one check for every command.
//!
//! Real devices are `cpu` and `cuda[:N]`; `meta` and `meta:cuda` compute the exact memory of a
//! step on the CPU or a GPU without running it. Commands that run steps check that the device
//! exists here ([`parse_device`]); commands that only plan accept `cuda[:N]` on any machine as
//! the target to plan for ([`parse_planning_device`]).

use crate::error::{CliError, Result};
use memopt_core::Device;

/// The values `--device` takes, as every command's help shows them.
pub const DEVICE_VALUES: &str = "cpu|cuda[:N]|meta|meta:cuda";

/// Parses `--device` for a command that runs steps and checks that the device can be used
/// here: `cpu`, `meta`, `meta:cuda`, or `cuda[:N]` when a CUDA driver and GPU N exist. The
/// error names the devices that are valid on this machine.
pub fn parse_device(s: &str) -> Result<Device> {
    let device = parse_planning_device(s)?;
    if let Device::Cuda(ordinal) = device {
        let count = memopt_core::cuda_device_count().map_err(|e| {
            CliError::Invalid(format!(
                "--device {s}: {e}; valid devices here are cpu, meta and meta:cuda"
            ))
        })?;
        if ordinal >= count {
            return Err(CliError::Invalid(format!(
                "--device {s}: GPU {ordinal} does not exist; this machine has {}",
                valid_gpus(count)
            )));
        }
    }
    Ok(device)
}

/// Parses `--device` for a command that only plans: any device, no GPU needed (`cuda[:N]`
/// plans for the CUDA target). A usage error naming the valid spellings otherwise.
pub fn parse_planning_device(s: &str) -> Result<Device> {
    s.parse::<Device>()
        .map_err(|e| CliError::Usage(format!("--device: {e}")))
}

/// The GPUs of a machine with `count` of them, in words.
fn valid_gpus(count: usize) -> String {
    match count {
        0 => "no CUDA device; use --device cpu, meta or meta:cuda".to_string(),
        1 => "1 CUDA device: cuda:0 (or cuda)".to_string(),
        n => format!("{n} CUDA devices: cuda:0 to cuda:{}", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_and_errors() {
        assert_eq!(parse_planning_device("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(parse_planning_device("cuda:3").unwrap(), Device::Cuda(3));
        assert_eq!(
            parse_device("meta:cuda").unwrap(),
            Device::Meta(memopt_core::Target::Cuda)
        );
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA"] {
            let e = parse_planning_device(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("cuda:N"), "{e}");
        }
        assert!(valid_gpus(2).contains("cuda:0 to cuda:1"));
        // Without a GPU the error says why and what is valid; with one, an ordinal past the
        // last GPU names the valid ones.
        let e = parse_device("cuda:99").unwrap_err().to_string();
        assert!(e.contains("--device cuda:99"), "{e}");
        assert!(e.contains("meta:cuda") || e.contains("cuda:0"), "{e}");
    }
}
