#!/usr/bin/env bash
# Session call 4 (1×H200): after the offload review mends: gpu_e2e (one GPU: fp16 offload added),
# and GPT-2 1.3B micro-batch 16 with zero.offload = cpu again (the step's bucket loop changed).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
echo "=== b13_offload $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --skip-torch --trellis build/train_gpt --models 1.3b --micro-batch 16 --steps 6 \
  --warmup 2 --trellis-set zero.offload=cpu --out "$out/b13_offload.md" > "$out/b13_offload.log" 2>&1
echo "exit $?"; grep -E "^\| 1.3b|rror" "$out/b13_offload.log" | tail -2
tar czf /tmp/call4.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call4.tgz "$out/"
echo "=== done $(date +%T)"
