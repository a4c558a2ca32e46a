#!/usr/bin/env bash
# Session call 3 (one GPU): examples/configs/phi3_mini_4k_finetune.toml as shipped (3.8B, window 2047,
# full recomputation, micro-batch 2 x 8 of 4096 tokens) on random weights and synthetic tokens: does
# it fit one GPU, and at what speed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets train_gpt
for w in 2047; do
  timeout 200 build/train_gpt examples/configs/phi3_mini_4k_finetune.toml --set data.source=synthetic --set data.path= \
    --set train.steps=4 --set log.every=1 --set log.val_every=0 --set checkpoint.dir= --set log.metrics_file= \
    --set model.sliding_window=$w > "$out/phi3_w$w.log" 2>&1
  echo "window $w: exit $? | $(grep -E '^step +4/' "$out/phi3_w$w.log" | cut -c1-200) | $(grep -E '^done|error' "$out/phi3_w$w.log" | head -2 | cut -c1-200)"
done
echo "=== done (${SECONDS}s)"
