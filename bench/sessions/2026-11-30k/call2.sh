#!/usr/bin/env bash
# Session call 2 (2×H200), issue 9 on two GPUs. First GPT-2 1.3B at (tensor, pipeline, data) =
# (1, 1, 2), ZeRO stage 1, 100 steps of layout_3d.sh (its one-GPU curves came from call 1). Then a ~7B
# GPT (32 layers, d_model 4096, 32 heads), global batch 8 x 1024 tokens, after the split masters:
# PyTorch FSDP2 (micro-batch 4 per GPU) against Trellis at tensor = 2 (checkpointing none and
# elementwise), at pipeline = 2 (1F1B, micro-batch 2: four micro-batches a step) and at data = 2 with
# ZeRO stage 3 (elementwise).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== layout_3d at (1, 1, 2) $(date +%T)"
MODEL=1.3b NP=2 TP=1 PP=1 RUNS="3d" TIMEOUT=150 bash bench/layout_3d.sh build/train_gpt | grep -E "ok in|FAILED|\| 3d"
B="python3 bench/bench_gpt.py --models 7b --micro-batch 4 --steps 10 --warmup 3 --trellis build/train_gpt --data-parallel 2 --skip-single"
bench() {  # NAME TIMEOUT ARGS...: one bench_gpt run, its table rows
  local name=$1 limit=$2; shift 2
  echo "=== 7b $name $(date +%T)"
  timeout "$limit" $B "$@" --out "$out/bench_7b_$name.md" > "$out/bench_7b_$name.log" 2>&1
  echo "exit $?"; grep -E "^\| 7b|rror" "$out/bench_7b_$name.log" | tail -4
}
bench tp2 260 --torch-parallel fsdp --trellis-layout 2,1
bench tp2_elementwise 100 --skip-torch --trellis-layout 2,1 --checkpointing elementwise
bench pp2 100 --skip-torch --trellis-layout 1,2 --trellis-set train.micro_batch=2
bench z3_elementwise 100 --skip-torch --trellis-set zero.stage=3 --checkpointing elementwise
tar czf /tmp/call2.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call2.tgz "$out/"
echo "=== done $(date +%T)"
