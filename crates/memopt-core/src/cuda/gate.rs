//! Gates for tests and benchmarks that need a GPU or NVRTC: they print why they skip, or fail
//! when the run requires the hardware (`MEMOPT_REQUIRE_GPU=1`, set by the GPU bundle's `run.sh`;
//! `MEMOPT_REQUIRE_NVRTC=1`, set by CI).

use super::nvrtc_available;
use crate::cuda_device_count;

fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// Why a GPU with NVRTC cannot be used here, or `Ok` when it can.
pub fn gpu_with_nvrtc() -> Result<(), String> {
    match cuda_device_count() {
        Ok(n) if n > 0 => nvrtc_available().map_err(|e| format!("a GPU is present but {e}")),
        Ok(_) => Err("no CUDA device".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `test` can run on GPU 0 with NVRTC. Otherwise prints why it skips and returns false,
/// or panics when `MEMOPT_REQUIRE_GPU=1` (a skip is then a failure).
pub fn gpu_or_skip(test: &str) -> bool {
    match gpu_with_nvrtc() {
        Ok(()) => true,
        Err(why) if required("MEMOPT_REQUIRE_GPU") => panic!("{test}: MEMOPT_REQUIRE_GPU=1 but {why}"),
        Err(why) => {
            eprintln!("skipping {test}: {why}");
            false
        }
    }
}

/// Whether `test` can compile with NVRTC. Otherwise prints why it skips and returns false, or
/// panics when `MEMOPT_REQUIRE_NVRTC=1`.
pub fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc_available() {
        Ok(()) => true,
        Err(e) if required("MEMOPT_REQUIRE_NVRTC") => panic!("{test}: MEMOPT_REQUIRE_NVRTC=1 but {e}"),
        Err(e) => {
            eprintln!("skipping {test}: {e}");
            false
        }
    }
}
