//! Every CUDA kernel source of the training step compiles with NVRTC, to PTX and to an sm_90
//! (H100/H200) cubin, on any machine with libnvrtc (no GPU needed); every declared kernel is
//! defined and every defined kernel is declared; the PTX obeys the determinism rules (no fused
//! multiply-add, no floating-point atomics). Without libnvrtc the test prints why it skips,
//! unless MEMOPT_REQUIRE_NVRTC=1 (as in CI) or MEMOPT_REQUIRE_GPU=1, where absence fails.

use memopt_core::cuda::launchers::kernel_tables;
use memopt_core::cuda::{
    KernelSource, KernelTable, check_signatures_against_ptx, compile_cubin, compile_kernel_source,
    kernel_sources, nvrtc_or_skip, nvrtc_version, ptx_entries,
};

/// Names of the `extern "C" __global__` functions a source defines, read from its text
/// (including kernels stamped out by macros: `NAME(kernel_name, ...)` lines after a
/// `#define NAME(name, ...)` whose body declares `extern "C" __global__ void name(`).
fn defined_kernels(src: &KernelSource) -> Vec<String> {
    let text = src.source;
    let mut names = Vec::new();
    let mut macros = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(def) = line.strip_prefix("#define ") {
            let m = def.split('(').next().unwrap_or("").to_string();
            macros.push(m);
        }
    }
    let mut in_define = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#define") {
            in_define = true;
        }
        let continued = line.trim_end().ends_with('\\');
        if !in_define && let Some(rest) = line.split("__global__").nth(1) {
            // `void name(` possibly after attributes such as __launch_bounds__(..).
            if let Some(after_void) = rest.split("void").nth(1) {
                let name: String = after_void
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        }
        if !in_define {
            for m in &macros {
                if let Some(args) = trimmed.strip_prefix(&format!("{m}("))
                    && text.contains(&format!("#define {m}(name,"))
                {
                    let name: String = args
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.push(name);
                }
            }
        }
        if in_define && !continued {
            in_define = false;
        }
    }
    names
}

/// Kernels that call CUDA's `expf` / `exp` / `log`, whose implementations use fused
/// multiply-add; they are compared with the CPU within 1e-5 relative, not bit for bit.
const USES_LIBM: [&str; 3] = ["ew_sigmoid", "ce_blocks", "ce_backward"];

/// Kernels whose source calls `fmaf` explicitly: the sigmoid surrogate's `exp_nonpositive`
/// (neuron.cu), which mirrors the CPU's `f32::mul_add` steps, so these kernels may contain
/// `fma.rn.f32` (one rounding, as on the CPU) and no other fused operation.
const EXPLICIT_FMAF: [&str; 6] = [
    "neuron_backward_hard_sigmoid",
    "neuron_backward_soft_sigmoid",
    "plif_backward_hard_decay_sigmoid",
    "plif_backward_soft_decay_sigmoid",
    "plif_backward_hard_nodecay_sigmoid",
    "plif_backward_soft_nodecay_sigmoid",
];

/// Compiles one source to PTX and for sm_90 and checks it (including its launch signatures
/// against the PTX); returns its kernel count.
fn check_source(src: &KernelSource, table: &KernelTable) -> usize {
    assert!(
        std::ptr::eq(src, table.source),
        "{}: table of another source",
        src.name
    );
    let mut declared: Vec<String> = src.kernels.iter().map(|k| k.to_string()).collect();
    let mut defined = defined_kernels(src);
    declared.sort();
    defined.sort();
    assert_eq!(declared, defined, "{}: declared vs defined kernels", src.name);

    let started = std::time::Instant::now();
    // compile_kernel_source fails unless the PTX defines every declared kernel.
    let ptx = compile_kernel_source(src).unwrap_or_else(|e| panic!("{e}"));
    let text = ptx.to_src();
    check_signatures_against_ptx(table, &text).unwrap_or_else(|e| panic!("{e}"));
    // --fmad=false: no contraction of a * b + c (the CPU rounds twice). Only kernels that
    // call CUDA's exp/log (not bit-identical to the CPU's libm anyway) contain the fused
    // operations of those library functions, and the kernels that call fmaf where the CPU calls
    // mul_add contain fma.rn.f32.
    for (name, body) in ptx_entries(&text) {
        if USES_LIBM.contains(&name) {
            continue;
        }
        let explicit = EXPLICIT_FMAF.contains(&name);
        assert!(
            !explicit || body.contains("fma.rn.f32"),
            "{}: kernel {name} is listed as calling fmaf but contains no fma.rn.f32",
            src.name
        );
        for fma in ["fma.rn.f32", "fma.rn.f64", "mad.f32", "fma.rn.ftz.f32"] {
            if explicit && fma == "fma.rn.f32" {
                continue;
            }
            assert!(!body.contains(fma), "{}: kernel {name} contains {fma}", src.name);
        }
    }
    // No floating-point atomics (results must not depend on scheduling).
    for atom in [
        "atom.global.add.f32",
        "atom.global.add.f64",
        "red.global.add.f32",
        "red.global.add.f64",
    ] {
        assert!(!text.contains(atom), "{}: the PTX contains {atom}", src.name);
    }
    let cubin = compile_cubin(src, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        cubin.starts_with(b"\x7fELF"),
        "{}: the sm_90 cubin is not an ELF",
        src.name
    );
    eprintln!(
        "{}: {} kernels, PTX + sm_90 in {:.1} s",
        src.name,
        src.kernels.len(),
        started.elapsed().as_secs_f64()
    );
    src.kernels.len()
}

#[test]
fn every_training_kernel_compiles_to_ptx_and_for_sm_90() {
    if !nvrtc_or_skip("every_training_kernel_compiles_to_ptx_and_for_sm_90") {
        return;
    }
    let (major, minor) = nvrtc_version().unwrap();
    eprintln!("NVRTC {major}.{minor}");
    // One thread per source: NVRTC compiles independent programs concurrently.
    let total: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = kernel_sources()
            .into_iter()
            .zip(kernel_tables())
            .map(|(src, table)| scope.spawn(move || check_source(src, table)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(total >= 60, "only {total} kernels");
    eprintln!("{total} kernels compiled to PTX and sm_90");
}

#[test]
fn cubin_compilation_reports_bad_architectures_and_source_errors() {
    if !nvrtc_or_skip("cubin_compilation_reports_bad_architectures_and_source_errors") {
        return;
    }
    let src = &memopt_core::cuda::launchers::OPTIM;
    let e = compile_cubin(src, "compute_90").unwrap_err().to_string();
    assert!(e.contains("compute_90") && e.contains("sm_90"), "{e}");
    let bad = KernelSource {
        name: "bad.cu",
        source: "extern \"C\" __global__ void k() { undeclared = 1; }",
        kernels: &["k"],
    };
    let e = compile_cubin(&bad, "sm_90").unwrap_err().to_string();
    assert!(e.contains("bad.cu") && e.contains("undeclared"), "{e}");
    let missing = KernelSource {
        name: "missing.cu",
        source: "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }",
        kernels: &["k", "absent"],
    };
    let e = compile_cubin(&missing, "sm_90").unwrap_err().to_string();
    assert!(e.contains("absent"), "{e}");
}
