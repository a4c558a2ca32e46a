#!/usr/bin/env bash
# Session call 2 (one GPU): the rotary kernel with 2- and 4-pair loads: its parity test (head sizes
# 128, 12, 6), GPT-2 1.3B learned / rope alternating (the rotation's cost); MoE shared experts timed
# (350M shape, 8 experts top 2 in every other block, moe.shared_experts 0 / 1 alternating); one
# bench_gpt round at 1.3B against PyTorch, and one with both on rotary positions (bench_gpt --rope).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== rotary parity $(date +%T)"
build/tests/ops_parity_test --gtest_filter='*Rotary*' 2>&1 | tail -3
median() {  # the median step ms of the last 10 steps of a train_gpt log
  grep '^step' "$1" | tail -10 | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n |
    awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'
}
echo "=== 1.3B learned / rope $(date +%T)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
for pos in learned rope learned rope; do
  timeout 100 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=15 --set log.every=1 \
    --set model.position_embedding=$pos > "$out/13b_$pos.log" 2>&1
  echo "$pos: median of the last 10 steps $(median "$out/13b_$pos.log") ms"
done
echo "=== MoE 350M shape, shared experts 0 / 1 $(date +%T)"
M350="--set model.n_layers=24 --set model.d_model=1024 --set model.n_heads=16 --set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2"
for s in 0 1 0 1; do
  timeout 100 build/train_gpt bench/profile_124m.toml $M350 --set moe.shared_experts=$s --set train.steps=15 \
    --set log.every=1 > "$out/moe_s$s.log" 2>&1
  echo "shared_experts $s: median of the last 10 steps $(median "$out/moe_s$s.log") ms, $(grep -o 'peak [0-9.]* GiB' "$out/moe_s$s.log" | tail -1)"
done
echo "=== bench_gpt 1.3B $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 2>&1 | tail -4
echo "=== bench_gpt 1.3B, both with rotary positions $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 --rope 10000 2>&1 | tail -4
echo "=== done $(date +%T)"
