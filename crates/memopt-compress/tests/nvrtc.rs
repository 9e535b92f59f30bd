//! Every CUDA kernel source of this crate compiles to PTX with NVRTC, on any machine with
//! libnvrtc (no GPU needed), and its signature table (the kinds every launch passes) matches
//! the `.param` list of each kernel's `.entry` in the PTX. Without libnvrtc the test prints why it skips and passes, unless
//! MEMOPT_REQUIRE_NVRTC=1 (as in CI) or MEMOPT_REQUIRE_GPU=1, where absence fails.

use memopt_compress::cuda::{kernel_sources, kernel_tables};
use memopt_core::cuda::{check_signatures_against_ptx, compile_kernel_source, nvrtc_or_skip, nvrtc_version};

#[test]
fn every_kernel_source_compiles_to_ptx() {
    if !nvrtc_or_skip("every_kernel_source_compiles_to_ptx") {
        return;
    }
    let (major, minor) = nvrtc_version().unwrap();
    eprintln!("NVRTC {major}.{minor}");
    let mut kernels = 0;
    for (src, table) in kernel_sources().into_iter().zip(kernel_tables()) {
        assert!(
            std::ptr::eq(src, table.source),
            "{}: table of another source",
            src.name
        );
        let ptx = compile_kernel_source(src).unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        check_signatures_against_ptx(table, &text).unwrap_or_else(|e| panic!("{e}"));
        for k in src.kernels {
            assert!(
                text.contains(&format!(".entry {k}(")),
                "{}: no {k} in the PTX",
                src.name
            );
            kernels += 1;
        }
        if src.name == "bitspike.cu" {
            // The pack kernels use a warp ballot.
            assert!(
                text.contains("vote.sync.ballot"),
                "bitspike.cu: no warp ballot in the PTX"
            );
        }
    }
    assert_eq!(kernels, 15);
}
