//! The per-context cache of loaded kernels: each [`KernelSource`] is compiled once per process
//! and loaded once per GPU; its functions are looked up once.

use super::KernelSource;
use super::nvrtc::compile_kernel_source;
use crate::storage::cuda_context;
use crate::{CoreError, Result};
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// Identity of a source: its name and the address of its text (two sources may share a name).
type SourceKey = (&'static str, usize);

struct Loaded {
    // Keeps the module loaded for as long as the process runs.
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
}

#[derive(Default)]
struct Cache {
    ptx: HashMap<SourceKey, Ptx>,
    loaded: HashMap<(usize, SourceKey), Loaded>,
}

fn cache() -> MutexGuard<'static, Cache> {
    static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);
    // A panic while holding the lock leaves at worst a missing entry, which is rebuilt.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kernel `kernel` of `src`, loaded into the context of GPU `ordinal`. The first call per
/// source compiles it with NVRTC; the first call per (GPU, source) loads the module and all of
/// its kernels; later calls are a map lookup.
pub fn cuda_function(ordinal: usize, src: &'static KernelSource, kernel: &str) -> Result<CudaFunction> {
    const OP: &str = "loading a CUDA kernel";
    if !src.kernels.contains(&kernel) {
        return Err(CoreError::invalid(
            OP,
            format!(
                "{} declares no kernel '{kernel}'; it declares {:?}",
                src.name, src.kernels
            ),
        ));
    }
    let ctx = cuda_context(ordinal)?;
    let key: SourceKey = (src.name, src.source.as_ptr() as usize);
    let mut cache = cache();
    if let Some(f) = cache
        .loaded
        .get(&(ordinal, key))
        .and_then(|l| l.functions.get(kernel))
    {
        return Ok(f.clone());
    }
    let ptx = match cache.ptx.get(&key) {
        Some(p) => p.clone(),
        None => {
            let p = compile_kernel_source(src)?;
            cache.ptx.insert(key, p.clone());
            p
        }
    };
    let module = ctx.load_module(ptx).map_err(|e| CoreError::Cuda {
        op: OP,
        message: format!(
            "{} (GPU {ordinal}): {e}; if the PTX is newer than the driver supports \
             (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), use an NVRTC no newer than the driver",
            src.name
        ),
    })?;
    let mut functions = HashMap::new();
    for &name in src.kernels {
        let f = module.load_function(name).map_err(|e| CoreError::Cuda {
            op: OP,
            message: format!("{}: kernel '{name}': {e}", src.name),
        })?;
        functions.insert(name, f);
    }
    // `kernel` is among `src.kernels` (checked above), all of which were just inserted.
    let f = functions[kernel].clone();
    cache.loaded.insert(
        (ordinal, key),
        Loaded {
            _module: module,
            functions,
        },
    );
    Ok(f)
}

/// Number of (GPU, source) pairs loaded so far in this process (shows that the cache works).
pub fn loaded_module_count() -> usize {
    cache().loaded.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    static SRC: KernelSource = KernelSource {
        name: "cache_test.cu",
        source: "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 2.0f; }",
        kernels: &["k"],
    };

    /// Undeclared kernels are refused before any driver call; without a GPU the error says
    /// why, and never panics.
    #[test]
    fn lookups_fail_clearly() {
        let e = cuda_function(0, &SRC, "missing").unwrap_err().to_string();
        assert!(e.contains("cache_test.cu") && e.contains("missing"), "{e}");
        if !matches!(crate::cuda_device_count(), Ok(n) if n > 0) {
            let e = cuda_function(0, &SRC, "k").unwrap_err();
            assert!(
                matches!(
                    e,
                    CoreError::CudaUnavailable { .. } | CoreError::CudaDeviceNotFound { .. }
                ),
                "{e}"
            );
        }
    }

    /// With a GPU, a module is loaded once per context.
    #[test]
    fn gpu_modules_load_once_per_context() {
        if !crate::cuda::gpu_or_skip("gpu_modules_load_once_per_context") {
            return;
        }
        cuda_function(0, &SRC, "k").unwrap();
        let loaded = loaded_module_count();
        cuda_function(0, &SRC, "k").unwrap();
        assert_eq!(loaded_module_count(), loaded);
    }
}
