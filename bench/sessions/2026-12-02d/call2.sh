#!/usr/bin/env bash
# Session call 2 (1×H200): after expert parallelism (its two-GPU case needs two GPUs: not run here).
# gpu_e2e with its new experts cases (GPU against CPU in fp32, graphs bitwise, resume bitwise), and
# the per-op profile of GPT-2 124M with 8 experts in every other block (micro-batch 16): where the
# MoE step's time goes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
timeout 330 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|experts" "$out/gpu_e2e.log" | head -8
echo "=== profile $(date +%T)"
timeout 120 build/train_gpt bench/profile_124m.toml --set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 \
  --set moe.layer_freq=2 --set log.profile_ops=true > "$out/profile.log" 2>&1
echo "profile exit $?"; grep -E "experts:|step +6/6" "$out/profile.log"; sed -n '/per-op device time/,$p' "$out/profile.log" | head -45
echo "=== done $(date +%T)"
