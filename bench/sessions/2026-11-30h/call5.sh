#!/usr/bin/env bash
# Session call 5 (2×H200): fp16 (with loss scaling) against bf16 on the same GPU, alternating, since
# calls 3 and 4 ran them on different GPUs (fp16/bf16 0.964 and 0.948 there). GPU 0: GPT-2 1.3B
# micro-batch 16; GPU 1: 124M micro-batch 32, then 350M micro-batch 16. 15 steps each, medians after 5.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
pair() {  # GPU NAME LAYERS D_MODEL HEADS MICRO_BATCH: bf16, fp16, bf16, fp16 on that GPU
  local gpu=$1 name=$2
  (
    bin=build/train_gpt; out=$out/$name; mkdir -p "$out"; TIMEOUT=90
    source bench/layout_runs.sh
    run() {
      local run_name=$1; shift
      local sets=() s
      for s in "$@"; do sets+=(--set "$s"); done
      CUDA_VISIBLE_DEVICES=$gpu timeout "$TIMEOUT" "$bin" "$out/base.toml" --set log.metrics_file="$out/$run_name.jsonl" \
        "${sets[@]}" > "$out/$run_name.log" 2>&1 || { echo "    $run_name FAILED"; grep -iE "error|fatal" "$out/$run_name.log" | head -3; }
    }
    gpt_toml call5 $3 $4 $5 $6 15 > "$out/base.toml"
    run one; run fp16 train.precision=fp16; run bf16_2; run fp16_2 train.precision=fp16
    echo "--- $name on GPU $gpu"
    summary 5 one fp16 bf16_2 fp16_2
  )
}
pair 0 1.3B 24 2048 16 16 > "$out/gpu0.log" 2>&1 &
pid0=$!
pair 1 124M 12 768 12 32
pair 1 350M 24 1024 16 16
wait $pid0
cat "$out/gpu0.log"
echo "=== done $(date +%T)"
