//! The one rule for tests that need a GPU: they run where a CUDA device (and NVRTC) exists,
//! skip with a printed reason elsewhere, and fail, naming themselves, when `MEMOPT_REQUIRE_GPU=1`
//! says a GPU must be there (a GPU CI runner), so that a GPU test can never pass by skipping.

/// The environment variable that turns every GPU test's skip into a failure.
pub const REQUIRE_GPU_VAR: &str = "MEMOPT_REQUIRE_GPU";

/// Whether GPU test `test` can run here: `Ok(true)` with a CUDA device and NVRTC; `Ok(false)`
/// after printing why it skips; `Err` naming the test and the reason when
/// `MEMOPT_REQUIRE_GPU=1` (the caller panics with it).
pub fn gpu_for_test(test: &str) -> std::result::Result<bool, String> {
    let Err(missing) = gpu_with_nvrtc() else {
        return Ok(true);
    };
    if std::env::var(REQUIRE_GPU_VAR).as_deref() == Ok("1") {
        return Err(format!(
            "GPU test `{test}` cannot run: {REQUIRE_GPU_VAR}=1 but {missing}"
        ));
    }
    eprintln!("skipping GPU test `{test}`: {missing} (set {REQUIRE_GPU_VAR}=1 to make this a failure)");
    Ok(false)
}

/// [`gpu_for_test`] for test bodies: `true` to run, `false` to return (skip printed); panics
/// with the reason under `MEMOPT_REQUIRE_GPU=1`.
pub fn gpu_or_skip(test: &str) -> bool {
    gpu_for_test(test).unwrap_or_else(|e| panic!("{e}"))
}

/// Why a GPU with NVRTC cannot be used here (no driver, no device, no NVRTC), or `Ok` when it
/// can (for benchmarks, which report rather than skip).
pub fn gpu_with_nvrtc() -> std::result::Result<(), String> {
    match crate::cuda_device_count() {
        Ok(0) => Err("no CUDA device".to_string()),
        Ok(_) => super::nvrtc_available().map_err(|e| format!("a GPU is present but {e}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether test `test` can compile CUDA C with NVRTC (no GPU needed): `true` to run; `false`
/// after printing why it skips; panics when `MEMOPT_REQUIRE_NVRTC=1` (as in CI).
pub fn nvrtc_or_skip(test: &str) -> bool {
    match super::nvrtc_available() {
        Ok(()) => true,
        Err(e) if std::env::var("MEMOPT_REQUIRE_NVRTC").as_deref() == Ok("1") => {
            panic!("{test}: MEMOPT_REQUIRE_NVRTC=1 but {e}")
        }
        Err(e) => {
            eprintln!("skipping {test}: {e}");
            false
        }
    }
}
