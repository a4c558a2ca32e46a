#!/usr/bin/env bash
# Session call 3 (2×H200): sustained_gemm_probe.cu (every cuBLASLt candidate of the MLP's GELU GEMMs
# at GPT-2 1.3B's shape timed in steady state at the power cap, with its energy), then issue 9's
# 1 -> 2 GPU comparison: bench_gpt 1.3B micro-batch 16 on one GPU and at data = 2, Trellis ZeRO
# stage 1 against PyTorch FSDP2 (fully_shard per block and the root, bf16 compute, f32 reduce).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvcc -O2 -arch=sm_90 bench/sessions/2026-11-30i/sustained_gemm_probe.cu -lcublasLt -ldl -o /tmp/sgp \
  > "$out/sgp_build.log" 2>&1 || tail -5 "$out/sgp_build.log"
echo "=== sustained GEMM probe $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 120 /tmp/sgp 2>&1 | tee "$out/sgp.log"
build_trellis
echo "=== bench 1.3B, data = 2, FSDP $(date +%T)"
timeout 560 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b \
  --micro-batch 16 --data-parallel 2 --torch-parallel fsdp --trellis-set zero.stage=1 \
  --out "$out/bench_dp2_fsdp.md" > "$out/bench_dp2_fsdp.log" 2>&1; echo "bench exit $?"
grep -E "^\| |rror" "$out/bench_dp2_fsdp.log" | tail -12
echo "=== done $(date +%T)"
