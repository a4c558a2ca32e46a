#!/usr/bin/env bash
# Session call 2 (1×H200): the whole build, and every CUDA test of the suite (label cuda: the op
# parity tests, vocabulary-parallel and generation parity, the CUDA allocator) on the final code;
# gpu_e2e; train_gpt --plan on the GPU (the 1.3B plan against the measured peak, and the fit line);
# GPT-2 1.3B against PyTorch, one round (issue 8 tally).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|Failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS" "$out/gpu_e2e.log" | head -4
echo "=== plan $(date +%T)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
build/train_gpt bench/profile_124m.toml $L13 --plan
build/train_gpt bench/profile_124m.toml $L13 --plan --world 8 --set parallel.tensor=2 --set parallel.pipeline=2 \
  --set zero.stage=1 --set train.micro_batch=4 --set train.global_batch=64
echo "=== 1.3B, the run's own line $(date +%T)"
timeout 120 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=8 | grep -E "memory per rank|step +8/"
echo "=== 1.3B against PyTorch $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 2>&1 | grep -E "^\||loaded"
echo "=== done $(date +%T)"
