#!/usr/bin/env bash
# memopt GPU bundle: training on event data on the GPU, end to end (called by run.sh).
#
#   ./data_e2e.sh OUT_DIR [DEVICE]      (DEVICE default cuda; cpu runs the same steps here)
#
# 1. Events of the three formats -> frames: synthetic N-MNIST and CIFAR10-DVS recordings
#    (bin/synthetic_dataset) and the DVS128 Gesture fixture with its labels (events/).
# 2. CIFAR10-DVS VGG (2 classes, T=4, N=4): the default plan for the CUDA target, two epochs on
#    DEVICE with --save and --metrics; the loss must fall; the run's peaks measured on DEVICE
#    must equal those `train --device meta:cuda` predicts (requested and reserved, to the byte);
#    resumed from the saved state to eight epochs; evaluated on DEVICE with --logits.
# 3. N-MNIST and DVS128 frames: one epoch each of a small model on DEVICE.
# 4. With python3 + torch + SpikingJelly: SpikingJelly loads the saved weights (strict=True) and
#    gives the same logits (spikingjelly_data.py check), and the same training loop in PyTorch +
#    SpikingJelly is timed against memopt's on synthetic frames of the published VGG's size
#    (T=10, 2x48x48, N=32, 3 epochs; E2E_TIMING=0 skips it).
#
# 5. With python3 and a GPU: the largest batch of the CIFAR10-DVS VGG (T=10, 2x48x48) whose
#    default plan fits the GPU's free memory (Meta's exact reserved peak, searched by halving to
#    within 1/64). No step runs at that batch (one would take about a minute at today's GPU
#    speed); the bundle's other tests show Meta's reserved peak equal to the GPU's. SpikingJelly's
#    counterpart at its level 4 is not searched: its own plan search takes minutes per batch.
#
# Writes OUT_DIR/data_e2e/ (logs, plans, weights, logits, JSON figures) and
# OUT_DIR/data_e2e.json; the exit status is non-zero when a step failed.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:?usage: data_e2e.sh OUT_DIR [DEVICE]}"
DEVICE="${2:-cuda}"
E="$OUT/data_e2e"
rm -rf "$E" && mkdir -p "$E/logs" || { echo "error: cannot create $E" >&2; exit 2; }
E="$(cd "$E" && pwd)"
M="$HERE/bin/memopt"
S="$HERE/bin/synthetic_dataset"
failed=0
steps=()

# step NAME CMD...: runs CMD with its output in logs/NAME.log, records the exit status.
step() {
    local name="$1"; shift
    local start rc secs
    start=$(date +%s.%N)
    "$@" > "$E/logs/$name.log" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
    [ $rc -ne 0 ] && failed=1
    printf '  %-26s %s  %6ss\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")" "$secs"
    steps+=("{\"step\":\"$name\",\"exit_code\":$rc,\"seconds\":$secs}")
    return $rc
}

# The "(N bytes)" figures of the line of FILE starting with PREFIX: reserved then requested.
peaks() { grep -m1 "^$2" "$1" | grep -oE '\([0-9]+ bytes' | tr -dc '0-9 \n' | tr '\n' ' '; }

echo "data end to end on $DEVICE:"
# --- 1. three formats -> frames -----------------------------------------------------------------
step events_nmnist "$S" nmnist "$E/nmnist/raw" 2 8
step frames_nmnist "$M" frames --data "$E/nmnist/raw" --format nmnist --frames 4
step events_cifar10dvs "$S" cifar10dvs "$E/c10/raw" 2 32
step frames_cifar10dvs "$M" frames --data "$E/c10/raw" --format cifar10dvs --frames 4
mkdir -p "$E/dvs128/raw"
cp "$HERE/events/dvs128.aedat" "$E/dvs128/raw/user01_fluorescent.aedat"
cp "$HERE/events/dvs128_labels.csv" "$E/dvs128/raw/user01_fluorescent_labels.csv"
step frames_dvs128 "$M" frames --data "$E/dvs128/raw" --format dvs128 --frames 4

# --- 2. the VGG: default plan, two epochs, exact peaks, resume, eval ----------------------------
C10="$E/c10/frames_number_4_split_by_number"
VGG=(-m cifar10dvs-vgg -t 4 --input 2x128x128 --classes 2 -n 4)
DATA=(--data "$C10" --train-ratio 0.75)
step plan "$M" optimize "${VGG[@]}" --device cuda --out "$E/plan.json"
step predict "$M" train "${VGG[@]}" "${DATA[@]}" --plan "$E/plan.json" --device meta:cuda --epochs 2 --quiet
step train "$M" train "${VGG[@]}" "${DATA[@]}" --plan "$E/plan.json" --device "$DEVICE" --epochs 2 \
    --lr 0.01 --save "$E/vgg.safetensors" --metrics "$E/metrics.csv" --quiet
loss_falls=false
if [ -f "$E/metrics.csv" ] && awk -F, 'NR==2 {a=$3} NR==3 {b=$3} END {exit !(b < a)}' "$E/metrics.csv"; then
    loss_falls=true
else
    failed=1
fi
echo "  loss falls over two epochs: $loss_falls"
predicted="$(peaks "$E/logs/predict.log" 'predicted peak of the run')"
measured="$(peaks "$E/logs/train.log" 'measured peak of the run')"
exact=false
if [ "$DEVICE" = cuda ] || [[ "$DEVICE" == cuda:* ]]; then
    [ -n "$predicted" ] && [ "$predicted" = "$measured" ] && exact=true || failed=1
    echo "  meta:cuda predicted [$predicted] == measured [$measured] (reserved, requested bytes): $exact"
fi
cp "$E/vgg.state.safetensors" "$E/resume.state.safetensors" 2> /dev/null
# Six more epochs: after two, the network is nearly silent in eval mode (its BatchNorm running
# statistics have seen 24 batches), and logits that hardly depend on the input would make the
# comparison with SpikingJelly say little.
step resume "$M" train "${VGG[@]}" "${DATA[@]}" --plan "$E/plan.json" --device "$DEVICE" --epochs 8 \
    --lr 0.01 --resume "$E/resume.state.safetensors" --save "$E/vgg8.safetensors" --quiet
step eval "$M" eval "${VGG[@]}" "${DATA[@]}" --device "$DEVICE" --load "$E/vgg8.safetensors" \
    --logits "$E/logits.npz" --split all

# --- 3. the other two formats: one epoch of a small model each ----------------------------------
small_model() { # $1 = file, $2 = H (= W), $3 = classes, $4 = final pooling kernel
    cat > "$1" << EOF
{ "name": "small-$2", "input": { "time_steps": 4, "sample": [2, $2, $2], "classes": $3 },
  "layers": [ { "type": "conv2d", "out": 16, "kernel": 3, "padding": 1 }, { "type": "batch_norm" },
              { "type": "lif" }, { "type": "max_pool", "kernel": $4 }, { "type": "flatten" },
              { "type": "linear", "out": $3 } ] }
EOF
}
small_model "$E/nmnist.json" 34 2 17
small_model "$E/dvs128.json" 128 11 32
step train_nmnist "$M" train -m "$E/nmnist.json" -n 4 --data "$E/nmnist/frames_number_4_split_by_number" \
    --train-ratio 0.75 --device "$DEVICE" --epochs 1 --quiet
step train_dvs128 "$M" train -m "$E/dvs128.json" -n 2 --data "$E/dvs128/frames_number_4_split_by_number" \
    --train-ratio 1 --device "$DEVICE" --epochs 1 --quiet

# --- 4. SpikingJelly: the same logits, and the same loop timed ----------------------------------
py=skipped
if command -v python3 > /dev/null && python3 -c 'import torch, spikingjelly' 2> /dev/null; then
    py=ran
    # Different kernels round differently, and a membrane within rounding of the threshold fires on
    # one side only: up to 15% of the samples may differ where SpikingJelly's run shows such a
    # membrane; every other sample must agree within 1e-4 relative (the JSON keeps the strict
    # figures too). Measured on the CPU: 6 of 64 samples flipped, the rest within 8e-6.
    step sj_check python3 "$HERE/spikingjelly_data.py" check --frames "$C10" --weights "$E/vgg8.safetensors" \
        --logits "$E/logits.npz" --classes 2 --input 2x128x128 --max-flipped 0.15 --device "$DEVICE" \
        --out "$E/sj_check.json"
fi
if [ "$py" = ran ] && [ "${E2E_TIMING:-1}" != 0 ]; then
    step frames_timing "$S" frames "$E/timing" 2 64 10 2 48 48
    TIMING=(-m cifar10dvs-vgg --published --classes 2 -n 32 --data "$E/timing" --train-ratio 1 --epochs 3)
    step plan_timing "$M" optimize -m cifar10dvs-vgg --published --classes 2 -n 32 --device cuda \
        --out "$E/plan_timing.json"
    step memopt_timing "$M" train "${TIMING[@]}" --device "$DEVICE" --quiet
    step memopt_timing_plan "$M" train "${TIMING[@]}" --plan "$E/plan_timing.json" --device "$DEVICE" --quiet
    step sj_timing python3 "$HERE/spikingjelly_data.py" time --frames "$E/timing" --classes 2 --timesteps 10 \
        --input 2x48x48 --batch 32 --train-ratio 1 --epochs 3 --lr 0.1 --momentum 0.9 --device "$DEVICE" \
        --out "$E/sj_timing.json"
    grep -h "^trained" "$E/logs/memopt_timing.log" "$E/logs/memopt_timing_plan.log" | sed 's/^/  memopt: /'
fi
[ "$py" = skipped ] && echo "  SpikingJelly steps skipped: python3 with torch and spikingjelly not found"

# --- 5. the largest batch the default plan fits into this GPU ------------------------------------
largest=null
if [ "$py" = ran ] && [[ "$DEVICE" == cuda* ]] && command -v nvidia-smi > /dev/null; then
    free_mib="$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | head -1 | tr -dc '0-9')"
    reserved_at() { # $1 = batch: the default plan's exact reserved peak for the CUDA target, bytes
        "$M" optimize -m cifar10dvs-vgg --published -n "$1" --device cuda --json --out "$E/plan_n$1.json" \
            2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["planned_peaks"]["reserved_bytes"])'
    }
    fits() { local r; r="$(reserved_at "$1")" && [ -n "$r" ] && [ "$r" -le $((free_mib * 1048576)) ]; }
    lo=0 hi=32
    while fits "$hi" && [ "$hi" -lt 65536 ]; do lo=$hi; hi=$((hi * 2)); done
    # Halving down to 1/64 of the batch: a dozen plans of about 2 s each.
    while [ $((hi - lo)) -gt $(((lo + 63) / 64)) ]; do
        mid=$(((lo + hi) / 2)); if fits "$mid"; then lo=$mid; else hi=$mid; fi
    done
    largest=$lo
    echo "  largest batch of the VGG (T=10, 48x48) under the default plan in $free_mib MiB free: $largest"
fi

{
    echo "{"
    echo "  \"device\": \"$DEVICE\","
    echo "  \"largest_vgg_batch_default_plan\": $largest,"
    echo "  \"loss_falls\": $loss_falls,"
    echo "  \"peaks_predicted\": \"$predicted\","
    echo "  \"peaks_measured\": \"$measured\","
    echo "  \"peaks_exact\": $exact,"
    echo "  \"spikingjelly\": \"$py\","
    echo "  \"steps\": [$(IFS=,; echo "${steps[*]}")]"
    echo "}"
} > "$OUT/data_e2e.json"
echo "data end to end: $([ $failed -eq 0 ] && echo ok || echo FAILED) (figures in $OUT/data_e2e.json)"
exit $failed
