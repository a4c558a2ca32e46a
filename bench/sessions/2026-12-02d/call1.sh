#!/usr/bin/env bash
# Session call 1 (1×H200): mixture of experts on the GPU for the first time. The CUDA parity of the
# MoE ops (and the rest of ops_parity_test), the CPU unit tests of moe_test built for CUDA, the
# PyTorch loss/gradient check with experts on the GPU (fp32), a tiny MoE run on the GPU against the
# CPU (fp32), bf16 with and without CUDA graphs, and bench_gpt against PyTorch's MoE at 124M and
# 350M shapes with 8 experts top 2 in every other block.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test moe_test
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test 2>&1 | grep -E "MoE|PASSED|FAILED|Failure" -A3 | head -40
timeout 60 build/tests/moe_test 2>&1 | tail -2
echo "=== torch parity with experts $(date +%T)"
timeout 200 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 2>&1 | tail -3
echo "=== tiny MoE GPU vs CPU, fp32 $(date +%T)"
for dev in cuda cpu; do
  timeout 120 build/train_gpt examples/configs/tiny.toml --set train.device=$dev --set train.steps=100 --set log.every=50 --set moe.experts=4 --set moe.layer_freq=1 2>&1 | grep -E "step +(50|100)/"
done
for g in true false; do
  timeout 120 build/train_gpt examples/configs/tiny.toml --set train.device=cuda --set train.precision=bf16 --set train.steps=100 --set log.every=100 --set moe.experts=4 --set train.cuda_graphs=$g 2>&1 | grep -E "step +100/100 \| loss"
done
echo "=== bench $(date +%T)"
timeout 250 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch --models 124m --micro-batch 16 --moe 8,2,2 2>&1 | tail -6
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch --models 350m --micro-batch 8 --moe 8,2,2 2>&1 | tail -4
echo "=== done $(date +%T)"
