#!/usr/bin/env bash
# Session call 3 (1×H200): after the vectorized MoE kernels and the MoE statistics. CUDA parity of
# the MoE ops (with a one-element case, C = 20), the per-op profile of 124M with 8 experts in every
# other block again (against call 2's), and bench_gpt --moe 8,2,2 at 124M and 350M again.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test --gtest_filter='*MoE*' 2>&1 | grep -E "OK|PASSED|FAILED|Failure" -A2 | head -20
echo "=== profile $(date +%T)"
timeout 120 build/train_gpt bench/profile_124m.toml --set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 \
  --set moe.layer_freq=2 --set log.profile_ops=true > "$out/profile.log" 2>&1
echo "profile exit $?"; grep -E "step +6/6" "$out/profile.log"; sed -n '/per-op device time/,$p' "$out/profile.log" | grep -E "moe|per-op|bias_backward"
echo "=== bench $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch --models 124m --micro-batch 16 --moe 8,2,2 2>&1 | tail -3
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch --models 350m --micro-batch 8 --moe 8,2,2 2>&1 | tail -3
echo "=== done $(date +%T)"
