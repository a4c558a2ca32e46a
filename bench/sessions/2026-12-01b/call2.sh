#!/usr/bin/env bash
# Session call 2 (1×H200): with 16-bit gradients (train.grad_dtype = auto): bench_gpt 124M (micro-batch
# 32) and 350M (16) against PyTorch; 1.3B fp16 against bf16 (Trellis alone, back to back, as the
# thirteenth session measured it); 1.3B with zero.offload = cpu (the gradients now come down in bf16).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
run() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  echo "=== $name $(date +%T)"
  timeout "$limit" $B "$@" --out "$out/$name.md" > "$out/$name.log" 2>&1
  echo "exit $?"; grep -hE "^\| [0-9]|rror" "$out/$name.md" | tail -4
}
run b124m 150 --models 124m --micro-batch 32
run b350m 170 --models 350m --micro-batch 16
run b13_fp16 60 --models 1.3b --micro-batch 16 --skip-torch --precision fp16
run b13_bf16 60 --models 1.3b --micro-batch 16 --skip-torch
run b13_offload 120 --models 1.3b --micro-batch 16 --steps 6 --warmup 2 --skip-torch --trellis-set zero.offload=cpu
grep -h "loss_scale\|skipped" "$out"/b13_fp16.log | tail -3
tar czf /tmp/call2.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call2.tgz "$out/"
echo "=== done $(date +%T)"
