#!/usr/bin/env bash
# memopt GPU bundle: runs every GPU test binary, the GPU benchmark and training on event data end
# to end (data_e2e.sh) on this machine (no Rust toolchain needed) and writes logs plus JSON
# figures.
#
#   ./run.sh [OUT_DIR]        (default ./gpu-out)
#
# Needs: an NVIDIA driver (libcuda.so.1), NVRTC 13 (libnvrtc.so.13) and cuBLAS 13
# (libcublas.so.13). They are looked up with ldconfig, under /usr/local/cuda*/, and in Python
# site-packages (the nvidia-cuda-nvrtc-cu13 / nvidia-cublas wheels put them in
# site-packages/nvidia/*/lib). MEMOPT_REQUIRE_GPU=1 is set, so a test that would skip for want of
# a GPU fails instead. The exit status is non-zero when any binary failed.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-./gpu-out}"
mkdir -p "$OUT/logs" || { echo "error: cannot create $OUT/logs" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"

# --- find the CUDA libraries -------------------------------------------------------------------
found_dirs=()
add_dir() { [ -d "$1" ] && case ":${LD_LIBRARY_PATH:-}:" in *":$1:"*) ;; *) found_dirs+=("$1"); LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}";; esac; }
find_lib() { # $1 = soname pattern (e.g. libnvrtc.so.13); prints the first directory holding it
    local name="$1" p d
    p="$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')"
    if [ -n "$p" ]; then dirname "$p"; return 0; fi
    for d in /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib; do
        [ -e "$d/$name" ] && { echo "$d"; return 0; }
    done
    local sp
    for sp in $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]+sys.path))' 2>/dev/null) \
              /usr/local/lib/python3*/dist-packages /usr/lib/python3*/dist-packages /opt/conda/lib/python3*/site-packages "$HOME"/.local/lib/python3*/site-packages; do
        for d in "$sp"/nvidia/*/lib "$sp"/nvidia/cu13/lib; do
            [ -e "$d/$name" ] && { echo "$d"; return 0; }
        done
    done
    return 1
}
missing=()
for lib in libcuda.so.1 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13; do
    if d="$(find_lib "$lib")"; then add_dir "$d"; echo "found $lib in $d"; else missing+=("$lib"); fi
done
export LD_LIBRARY_PATH
if [ ${#missing[@]} -gt 0 ]; then
    echo "warning: not found: ${missing[*]} (tests that need them will fail and say so)" >&2
    echo "  NVRTC and cuBLAS without a toolkit: pip install nvidia-cuda-nvrtc==13.0.88 nvidia-cublas" >&2
fi

export MEMOPT_REQUIRE_GPU=1 MEMOPT_REQUIRE_NVRTC=1 RUST_BACKTRACE=1
(nvidia-smi -q > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi not available" > "$OUT/nvidia-smi.txt")
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "GPU: ${gpu_name:-unknown}"

# --- run every test binary ---------------------------------------------------------------------
failed=0
results=()
for bin in "$HERE"/tests/*; do
    [ -x "$bin" ] || continue
    name="$(basename "$bin")"
    start=$(date +%s.%N)
    "$bin" --test-threads=1 > "$OUT/logs/$name.log" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
    summary="$(grep -E '^test result:' "$OUT/logs/$name.log" | tail -1)"
    passed="$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed.*/\1/p')"
    nfailed="$(echo "$summary" | sed -nE 's/.* ([0-9]+) failed.*/\1/p')"
    status=ok; [ $rc -ne 0 ] && { status=FAILED; failed=1; }
    printf '%-28s %-6s %6ss  %s\n' "$name" "$status" "$secs" "$summary"
    results+=("{\"binary\":\"$name\",\"exit_code\":$rc,\"passed\":${passed:-0},\"failed\":${nfailed:-0},\"seconds\":$secs}")
done

# --- the benchmark -----------------------------------------------------------------------------
bench_rc=0
if [ -x "$HERE/bin/gpu_bench" ]; then
    "$HERE/bin/gpu_bench" --out "$OUT/figures.json" > "$OUT/logs/gpu_bench.log" 2>&1
    bench_rc=$?
    [ $bench_rc -ne 0 ] && failed=1
    echo "gpu_bench: exit $bench_rc (figures in $OUT/figures.json, log in $OUT/logs/gpu_bench.log)"
fi

# --- training on event data, end to end (python3 + SpikingJelly optional) -----------------------
if command -v python3 > /dev/null && ! python3 -c 'import spikingjelly' 2> /dev/null; then
    whls=("$HERE"/wheels/*.whl)
    if [ -e "${whls[0]}" ] && python3 -c 'import torch' 2> /dev/null; then
        python3 -m pip install --quiet --no-deps --target "$OUT/pydeps" "${whls[@]}" > "$OUT/logs/pip.log" 2>&1
        export PYTHONPATH="$OUT/pydeps${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
"$HERE/data_e2e.sh" "$OUT" cuda | tee "$OUT/logs/data_e2e.log"
e2e_rc=${PIPESTATUS[0]}
[ "$e2e_rc" -ne 0 ] && failed=1

# --- PyTorch + SpikingJelly side by side (optional: needs python3 with torch and CUDA) --------
py_rc=skipped
if command -v python3 > /dev/null && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    python3 "$HERE/spikingjelly_vgg.py" --device cuda --out "$OUT/spikingjelly.json" > "$OUT/logs/spikingjelly.log" 2>&1
    py_rc=$?
    echo "spikingjelly_vgg.py: exit $py_rc (see $OUT/logs/spikingjelly.log)"
else
    echo "spikingjelly_vgg.py: skipped (python3 with a CUDA build of torch not found)" | tee "$OUT/logs/spikingjelly.log"
fi

# --- summary -----------------------------------------------------------------------------------
{
    echo "{"
    echo "  \"gpu\": \"${gpu_name:-unknown}\","
    echo "  \"library_dirs\": \"${LD_LIBRARY_PATH:-}\","
    echo "  \"missing_libraries\": \"${missing[*]:-}\","
    echo "  \"tests\": [$(IFS=,; echo "${results[*]:-}")],"
    echo "  \"gpu_bench_exit_code\": $bench_rc,"
    echo "  \"data_e2e_exit_code\": $e2e_rc,"
    echo "  \"spikingjelly\": \"$py_rc\""
    echo "}"
} > "$OUT/summary.json"
echo "summary: $OUT/summary.json"
exit $failed
