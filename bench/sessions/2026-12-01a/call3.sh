#!/usr/bin/env bash
# Session call 3 (1×H200): optimizer offload after the pipelined copies and the vectorized host
# AdamW: gpu_e2e (offloaded against on the device), then GPT-2 1.3B micro-batch 16 and the ~7B GPT
# (micro-batch 2, elementwise checkpointing) with zero.offload = cpu, as in call 2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
B="python3 bench/bench_gpt.py --skip-torch --trellis build/train_gpt"
run() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  echo "=== $name $(date +%T)"
  timeout "$limit" $B "$@" --out "$out/$name.md" > "$out/$name.log" 2>&1
  echo "exit $?"; grep -E "^\| (1.3b|7b)|rror|offload:" "$out/$name.log" | tail -4
}
run b13_offload 200 --models 1.3b --micro-batch 16 --steps 6 --warmup 2 --trellis-set zero.offload=cpu
run b7_offload 280 --models 7b --micro-batch 2 --steps 3 --warmup 1 --checkpointing elementwise --trellis-set zero.offload=cpu
tar czf /tmp/call3.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call3.tgz "$out/"
echo "=== done $(date +%T)"
