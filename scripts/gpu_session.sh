#!/usr/bin/env bash
# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
#
# One prepared GPU session: everything a lent GPU machine is for, in one command that fits its
# device-time budget. Run it in the repository root; results go to $OUT (the device tool's
# output folder; default gpu_out/).
#
#   1. environment: Python, torch, CUDA device, the modules the package imports
#   2. fast_seg trained on CamVid with data and augmentation on the GPU (issue 16), budget
#      TRAIN_MINUTES (default 5), after a 10-step smoke run; needs device_data/ from
#      scripts/pack_seg_data.py, carried to the machine (it is git-ignored)
#   2b. its depth head trained on the synthetic rooms (rendered there), backbone and
#      segmentation head frozen, budget DEPTH_MINUTES (default 1.5): a shippable file needs
#      both heads trained, the recipe of the fast_seg model card
#   2c. the class-weight bias removed from the result (train seg-adjust, tau chosen on the
#      validation split): the file to ship, as the fast_seg model card describes
#   3. dense presets and LoFTR under CUDA in float32/TF32/float16/bfloat16 against the CPU
#      float32 result (bench/dense_cuda_bench.py, bench/loftr_cuda_bench.py; issue 15)
#
# Every step has its own time limit and the next step runs whatever the previous gave.
# Usage: bash scripts/gpu_session.sh [TRAIN_MINUTES [DEPTH_MINUTES]]
#        (DEVICE=cpu for a dry run here, e.g. DEVICE=cpu bash scripts/gpu_session.sh 0.2 0.2)

set -uo pipefail
OUT=${OUT:-gpu_out}
MINUTES=${1:-5}
DEPTH_MINUTES=${2:-1.5}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}

{
    date -u
    "$PYTHON" --version
    "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
    for module in numpy cv2 scipy yaml safetensors onnx onnxruntime kornia gtsam; do
        "$PYTHON" -c "import $module; print('$module', getattr($module, '__version__', 'ok'))" \
            2>&1 | tail -n 1
    done
    command -v nvidia-smi > /dev/null && nvidia-smi
} > "$OUT/environment.txt" 2>&1

train=("$PYTHON" -m relperception.cli.main train seg --config fast_seg
       --data device_data/camvid_train --val-data device_data/camvid_val --device "$DEVICE"
       --device-augment --batch-size 16 --lr 3e-3 --weight-decay 1e-2 --scale-range 0.5 2.0
       --no-progress)
if [ "$DEVICE" != cpu ]; then
    train+=(--bf16)
fi
if [ -d device_data/camvid_train ]; then
    if timeout 180 "${train[@]}" --steps 10 -o "$OUT/smoke" > "$OUT/train_smoke.log" 2>&1; then
        rm -rf "$OUT/smoke"
        seconds=$(awk "BEGIN {print int($MINUTES * 60 + 120)}")
        timeout "$seconds" "${train[@]}" --time-budget-min "$MINUTES" --val-every 500 \
            --checkpoint-every 500 -o "$OUT/fast_seg" > "$OUT/train_fast_seg.log" 2>&1
        echo "fast_seg training exit code $?" >> "$OUT/train_fast_seg.log"
        if [ -f "$OUT/fast_seg/best.safetensors" ]; then
            seconds=$(awk "BEGIN {print int($DEPTH_MINUTES * 60 + 90)}")
            timeout "$seconds" "$PYTHON" -m relperception.cli.main train depth --config fast_seg \
                --init "$OUT/fast_seg/best.safetensors" --data synth:0-15:30 \
                --val-data synth:1000-1001:10 --device "$DEVICE" --batch-size 8 --lr 2e-3 \
                --warmup-steps 30 --time-budget-min "$DEPTH_MINUTES" \
                --val-every 200 --checkpoint-every 200 --no-progress \
                -o "$OUT/fast_seg_depth" > "$OUT/train_fast_seg_depth.log" 2>&1
            echo "depth head training exit code $?" >> "$OUT/train_fast_seg_depth.log"
            weights="$OUT/fast_seg_depth/best.safetensors"
            [ -f "$weights" ] || weights="$OUT/fast_seg/best.safetensors"
            timeout 300 "$PYTHON" -m relperception.cli.main train seg-adjust --config fast_seg \
                --init "$weights" --val-data device_data/camvid_val --device "$DEVICE" \
                -o "$OUT/fast_seg_adjusted" > "$OUT/seg_adjust.log" 2>&1
            echo "seg-adjust exit code $?" >> "$OUT/seg_adjust.log"
        fi
    else
        echo "smoke run failed: training skipped (see train_smoke.log)" > "$OUT/train_fast_seg.log"
    fi
else
    echo "no device_data/: run scripts/pack_seg_data.py and carry device_data" \
        > "$OUT/train_fast_seg.log"
fi

timeout 240 "$PYTHON" bench/dense_cuda_bench.py --device "$DEVICE" --repeats 10 \
    --output "$OUT" > "$OUT/dense_cuda_bench.txt" 2>&1
if [ "$DEVICE" != cpu ]; then
    timeout 120 "$PYTHON" bench/loftr_cuda_bench.py --repeats 10 --output "$OUT" \
        > "$OUT/loftr_cuda_bench.txt" 2>&1
fi
ls -la "$OUT"
