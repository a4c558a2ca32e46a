#!/usr/bin/env bash
# Session call 2 (2×H200): the fifteenth session's changes on the GPU. gpu_e2e (now with the
# optimizer offloaded against on the device, fp32 and bf16); the memory check before the model is
# built (GPT-2 1.3B at micro-batch 512: one line); optimizer offload on one GPU: GPT-2 1.3B
# micro-batch 16 with and without it (tokens/s, peak memory), and a ~7B GPT (32 layers, d_model
# 4096) on one H200, micro-batch 2, elementwise checkpointing, without offload and with it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_trellis
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
echo "=== memory check $(date +%T)"
gpt_toml call2 24 2048 16 512 2 > "$out/big.toml"
CUDA_VISIBLE_DEVICES=0 timeout 120 build/train_gpt "$out/big.toml" > "$out/big.log" 2>&1; echo "exit $?"; tail -2 "$out/big.log"
export CUDA_VISIBLE_DEVICES=0
B="python3 bench/bench_gpt.py --skip-torch --trellis build/train_gpt"
run() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  echo "=== $name $(date +%T)"
  timeout "$limit" $B "$@" --out "$out/$name.md" > "$out/$name.log" 2>&1
  echo "exit $?"; grep -E "^\| (1.3b|7b)|rror|offload:" "$out/$name.log" | tail -4
  free -g | sed -n 2p
}
run b13_device 150 --models 1.3b --micro-batch 16 --steps 6 --warmup 2
run b13_offload 200 --models 1.3b --micro-batch 16 --steps 6 --warmup 2 --trellis-set zero.offload=cpu
run b7_device 150 --models 7b --micro-batch 2 --steps 3 --warmup 1 --checkpointing elementwise
run b7_offload 280 --models 7b --micro-batch 2 --steps 3 --warmup 1 --checkpointing elementwise --trellis-set zero.offload=cpu
tar czf /tmp/call2.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call2.tgz "$out/"
echo "=== done $(date +%T)"
