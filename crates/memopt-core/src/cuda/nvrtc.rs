//! NVRTC: availability, version and compilation of CUDA C to PTX.

use super::KernelSource;
use crate::{CoreError, Result};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::sync::OnceLock;

/// How to make NVRTC available, appended to every "not found" message.
const INSTALL_HINT: &str = "install it with `pip install --target .nvrtc nvidia-cuda-nvrtc==13.0.*` \
     and add `.nvrtc/nvidia/cu13/lib` to LD_LIBRARY_PATH (or install the CUDA 13 toolkit)";

/// The options every memopt kernel is compiled with: C++17, and no fused multiply-add, so that
/// `a * b + c` rounds twice exactly as the CPU kernels do (NVRTC never enables fast math unless
/// asked; `--use_fast_math` is not among them).
pub const NVRTC_OPTIONS: [&str; 2] = ["--std=c++17", "--fmad=false"];

/// Whether NVRTC (`libnvrtc.so`) can be loaded; the error says why not and how to fix it.
/// Checked once per process; must precede every NVRTC call because cudarc panics when the
/// library is absent.
pub fn nvrtc_available() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library by its candidate names; no NVRTC call is made.
    let present = *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() });
    if present {
        Ok(())
    } else {
        Err(CoreError::CudaUnavailable {
            reason: format!(
                "the NVRTC library (libnvrtc.so.13) was not found, so CUDA kernels cannot be \
                 compiled; {INSTALL_HINT}"
            ),
        })
    }
}

/// The version of the loaded NVRTC as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    nvrtc_available()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above) and both pointers are valid for writes.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CoreError::Cuda {
            op: "querying the NVRTC version",
            message: format!("{status:?}"),
        });
    }
    Ok((major, minor))
}

/// Compiles CUDA C `source` to PTX with NVRTC; `name` is the file name used in messages.
/// A compile failure returns [`CoreError::Cuda`] with NVRTC's full log.
pub fn compile_ptx(source: &str, name: &str) -> Result<Ptx> {
    const OP: &str = "compiling a CUDA kernel with NVRTC";
    nvrtc_available()?;
    // cudarc panics on interior NUL bytes; reject them here instead.
    if source.contains('\0') || name.contains('\0') {
        return Err(CoreError::invalid(
            OP,
            format!("{name}: the source or its name contains a NUL byte"),
        ));
    }
    let opts = CompileOptions {
        name: Some(name.to_string()),
        options: NVRTC_OPTIONS.iter().map(|o| o.to_string()).collect(),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| CoreError::Cuda {
        op: OP,
        message: describe(name, e),
    })
}

/// Compiles a [`KernelSource`] and checks that the PTX defines every kernel it declares.
pub fn compile_kernel_source(src: &KernelSource) -> Result<Ptx> {
    let ptx = compile_ptx(src.source, src.name)?;
    let text = ptx.to_src();
    let missing: Vec<&str> = src
        .kernels
        .iter()
        .copied()
        .filter(|k| !text.contains(&format!(".entry {k}(")))
        .collect();
    if !missing.is_empty() {
        return Err(CoreError::invalid(
            "compiling a CUDA kernel with NVRTC",
            format!(
                "{}: the PTX defines no kernel named {missing:?}; declare them `extern \"C\" \
                 __global__` or fix KernelSource::kernels",
                src.name
            ),
        ));
    }
    Ok(ptx)
}

/// Compiles a [`KernelSource`] to a cubin (machine code) for the real architecture `arch`
/// (e.g. `"sm_90"` for H100/H200), with [`NVRTC_OPTIONS`], and checks that the cubin's symbol
/// table names every declared kernel. This is what a GPU of that architecture would run; it
/// needs NVRTC only, no GPU.
pub fn compile_cubin(src: &KernelSource, arch: &str) -> Result<Vec<u8>> {
    const OP: &str = "compiling a CUDA kernel to a cubin with NVRTC";
    use cudarc::nvrtc::{result, sys};
    use std::ffi::CString;
    nvrtc_available()?;
    let nul = |what: &str| CoreError::invalid(OP, format!("{}: {what} contains a NUL byte", src.name));
    let source = CString::new(src.source).map_err(|_| nul("the source"))?;
    let name = CString::new(src.name).map_err(|_| nul("the name"))?;
    if !arch.starts_with("sm_") || arch.contains('\0') {
        return Err(CoreError::invalid(
            OP,
            format!("architecture '{arch}' is not a real GPU architecture such as sm_90"),
        ));
    }
    let fail = |what: &str, e: cudarc::nvrtc::result::NvrtcError| CoreError::Cuda {
        op: OP,
        message: format!("{} ({arch}): {what}: {e:?}", src.name),
    };
    let prog = result::create_program(&source, Some(&name)).map_err(|e| fail("create", e))?;
    let mut options: Vec<String> = NVRTC_OPTIONS.iter().map(|o| o.to_string()).collect();
    options.push(format!("-arch={arch}"));
    // SAFETY: `prog` was created above and is destroyed exactly once below, after its last use.
    let outcome = unsafe {
        match result::compile_program(prog, &options) {
            Ok(()) => {
                let mut size = 0usize;
                let mut out = sys::nvrtcGetCUBINSize(prog, &mut size).result();
                let mut cubin = vec![0u8; size];
                if out.is_ok() && size > 0 {
                    out = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result();
                }
                out.map(|()| cubin).map_err(|e| fail("reading the cubin", e))
            }
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> = l.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(CoreError::Cuda {
                    op: OP,
                    message: format!(
                        "{} failed to compile for {arch} ({e:?}, options {options:?}):\n{}",
                        src.name,
                        log.trim_end()
                    ),
                })
            }
        }
    };
    // SAFETY: created above, not used after this.
    let destroyed = unsafe { result::destroy_program(prog) };
    let cubin = outcome?;
    destroyed.map_err(|e| fail("destroying the program", e))?;
    if cubin.is_empty() {
        return Err(CoreError::Cuda {
            op: OP,
            message: format!("{}: NVRTC returned an empty cubin for {arch}", src.name),
        });
    }
    let missing: Vec<&str> = src
        .kernels
        .iter()
        .copied()
        .filter(|k| {
            let sym = [k.as_bytes(), b"\0"].concat();
            !cubin.windows(sym.len()).any(|w| w == sym.as_slice())
        })
        .collect();
    if !missing.is_empty() {
        return Err(CoreError::invalid(
            OP,
            format!(
                "{}: the {arch} cubin defines no kernel named {missing:?}",
                src.name
            ),
        ));
    }
    Ok(cubin)
}

fn describe(name: &str, e: CompileError) -> String {
    match e {
        CompileError::CompileError { nvrtc, options, log } => format!(
            "{name} failed to compile ({nvrtc:?}, options {options:?}):\n{}",
            log.to_string_lossy().trim_end()
        ),
        other => format!("{name}: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::nvrtc_or_skip;

    #[test]
    fn compiles_and_reports_errors_with_the_log() {
        if !nvrtc_or_skip("compiles_and_reports_errors_with_the_log") {
            return;
        }
        let (major, _) = nvrtc_version().unwrap();
        assert!(major >= 11);
        let ok = KernelSource {
            name: "ok.cu",
            source: "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }",
            kernels: &["k"],
        };
        assert!(compile_kernel_source(&ok).unwrap().to_src().contains(".entry k("));
        let missing = KernelSource {
            kernels: &["k", "absent"],
            ..ok
        };
        let e = compile_kernel_source(&missing).unwrap_err().to_string();
        assert!(e.contains("absent"), "{e}");
        let e = compile_ptx("__global__ void k() { undeclared = 1; }", "bad.cu")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.cu") && e.contains("undeclared"), "{e}");
        assert!(compile_ptx("a\0b", "nul.cu").is_err());
    }
}
