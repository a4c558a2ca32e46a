#!/usr/bin/env bash
# Session call 4 (2×H200). GPU 0: bench/layout_3d.sh's one-GPU curves for GPT-2 1.3B (100 steps,
# global batch 64 x 1024 tokens on the synthetic task, micro-batch 4 and 2); GPU 1 meanwhile: fp16
# (with loss scaling) against bf16 alternating on one GPU after the split masters (124M micro-batch
# 32, 350M and 1.3B micro-batch 16; 15 steps, medians after 5). Then both GPUs: the same 100 steps
# at (tensor, pipeline, data) = (2, 1, 1), and layout_3d's comparison of the curves.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
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
    gpt_toml call4 $3 $4 $5 $6 15 > "$out/base.toml"
    run one; run fp16 train.precision=fp16; run bf16_2; run fp16_2 train.precision=fp16
    echo "--- $name on GPU $gpu"
    summary 5 one fp16 bf16_2 fp16_2
  )
}
(pair 1 124M 12 768 12 32; pair 1 350M 24 1024 16 16; pair 1 1.3B 24 2048 16 16) > "$out/fp16.log" 2>&1 &
echo "=== layout_3d one-GPU runs $(date +%T)"
MODEL=1.3b NP=2 TP=2 PP=1 RUNS="base base_mb" TIMEOUT=200 bash bench/layout_3d.sh build/train_gpt
wait
cat "$out/fp16.log"
echo "=== layout_3d at (2, 1, 1) $(date +%T)"
MODEL=1.3b NP=2 TP=2 PP=1 RUNS="3d" TIMEOUT=150 bash bench/layout_3d.sh build/train_gpt
# One archive comes back (the device returns only so many files).
tar czf /tmp/call4.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call4.tgz "$out/"
echo "=== done $(date +%T)"
