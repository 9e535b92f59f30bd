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

/// The environment variable that turns every NVRTC-only test's skip into a failure (CI, which
/// installs NVRTC without a GPU). `MEMOPT_REQUIRE_GPU=1` does too: a machine with a usable GPU
/// has NVRTC (the GPU tests need it), so there a missing NVRTC is a broken setup, not a skip.
pub const REQUIRE_NVRTC_VAR: &str = "MEMOPT_REQUIRE_NVRTC";

/// Whether test `test` can compile CUDA C with NVRTC (no GPU needed): `true` to run; `false`
/// after printing why it skips; panics naming the test and the reason when
/// `MEMOPT_REQUIRE_NVRTC=1` or `MEMOPT_REQUIRE_GPU=1`.
pub fn nvrtc_or_skip(test: &str) -> bool {
    let missing = super::nvrtc_available().err().map(|e| e.to_string());
    let required = [REQUIRE_NVRTC_VAR, REQUIRE_GPU_VAR]
        .into_iter()
        .find(|v| std::env::var(v).as_deref() == Ok("1"));
    nvrtc_decision(test, missing, required).unwrap_or_else(|e| panic!("{e}"))
}

/// The rule of [`nvrtc_or_skip`] without the environment: run when nothing is `missing`;
/// otherwise an error naming the test when a `required` variable is set, else a printed skip.
fn nvrtc_decision(
    test: &str,
    missing: Option<String>,
    required: Option<&str>,
) -> std::result::Result<bool, String> {
    let Some(missing) = missing else {
        return Ok(true);
    };
    if let Some(var) = required {
        return Err(format!("NVRTC test `{test}` cannot run: {var}=1 but {missing}"));
    }
    eprintln!(
        "skipping NVRTC test `{test}`: {missing} (set {REQUIRE_NVRTC_VAR}=1 or {REQUIRE_GPU_VAR}=1 to make this a failure)"
    );
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::nvrtc_decision;

    #[test]
    fn nvrtc_tests_skip_unless_a_variable_requires_them() {
        assert_eq!(nvrtc_decision("t", None, Some("MEMOPT_REQUIRE_GPU")), Ok(true));
        assert_eq!(nvrtc_decision("t", Some("no libnvrtc".into()), None), Ok(false));
        for var in ["MEMOPT_REQUIRE_NVRTC", "MEMOPT_REQUIRE_GPU"] {
            let e = nvrtc_decision("compiles", Some("no libnvrtc".into()), Some(var)).unwrap_err();
            assert!(
                e.contains("`compiles`") && e.contains(var) && e.contains("no libnvrtc"),
                "{e}"
            );
        }
    }
}
