#!/usr/bin/env bash
# Session call 1 (one GPU): after this session's changes (communication counting and estimates,
# --layouts, the learning-rate schedules, the data checksum, MoE shared experts): the whole build,
# every CUDA test (label cuda), the PyTorch parity tests (MoE with a shared MLP), gpu_e2e (its MoE
# cases with a shared MLP); --plan and --layouts on a GPU host (the fit against this GPU); GPT-2
# 1.3B trained 12 steps under optimizer.schedule = wsd (the log's lr and step time); its per-op
# profile (issue 8: each GEMM shape's rate).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|Failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
echo "=== torch parity (dense, and MoE with a shared MLP) $(date +%T)"
(cd build && timeout 200 ctest -R torch_parity --output-on-failure > "$out/torch_parity.log" 2>&1); echo "torch parity exit $?"
grep -E "worst|rel err|Passed|Failed|tests passed" "$out/torch_parity.log" | head -12
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS" "$out/gpu_e2e.log" | head -4
echo "=== plan and layouts $(date +%T)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
build/train_gpt bench/profile_124m.toml $L13 --plan | tail -4
build/train_gpt bench/profile_124m.toml $L13 --layouts --world 8 --set train.global_batch=128
echo "=== 1.3B, wsd $(date +%T)"
timeout 150 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=12 --set optimizer.schedule=wsd \
  --set optimizer.warmup_steps=4 --set optimizer.decay_steps=4 --set log.every=1 | grep -E "memory per rank|^step"
echo "=== 1.3B per-op profile $(date +%T)"
timeout 150 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=12 --set log.profile_ops=true \
  --set log.every=100 > "$out/profile_13b.log" 2>&1; echo "profile exit $?"
sed -n '/per-op device time/,$p' "$out/profile_13b.log" | head -60
echo "=== done $(date +%T)"
