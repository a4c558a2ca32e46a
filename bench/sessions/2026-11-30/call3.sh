#!/usr/bin/env bash
# Session call 3 (one H200 used): issue 8's measurement after cuDNN attention, the GELU epilogues,
# cuBLASLt algorithm tuning and the two-pass layer-norm backward. Build, the CUDA parity tests, the
# PyTorch loss/gradient check on the GPU, a per-op profile of 1.3B, then bench_gpt.py: 124M (micro-
# batch 32), 350M and 1.3B (16) against PyTorch in bf16, and Trellis in fp16.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CUDA_VISIBLE_DEVICES=0
root=$(cd .. && pwd)
deps=$root/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$root/third_party" third_party
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -20; exit 1; }
echo "=== parity $(date +%T)"
timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -30
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -3
echo "=== profile 1.3b $(date +%T)"
timeout 90 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true --set train.steps=5 --set model.n_layers=24 \
  --set model.n_heads=16 --set model.d_model=2048 --set train.micro_batch=16 > "$out/profile_1.3b.log" 2>&1; echo "exit $?"
grep -E "^step" "$out/profile_1.3b.log" | tail -1 | cut -c1-200; sed -n '/per-op device time/,$p' "$out/profile_1.3b.log" | head -34
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== bench bf16 $(date +%T)"
timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" 2>&1 | grep -E "tok/s|^\| [0-9]"
timeout 300 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" 2>&1 | grep -E "tok/s|^\| [0-9]"
echo "=== Trellis fp16 $(date +%T)"
timeout 60 $B --models 124m --micro-batch 32 --precision fp16 --skip-torch 2>&1 | grep -E "tok/s"
timeout 90 $B --models 350m,1.3b --micro-batch 16 --precision fp16 --skip-torch 2>&1 | grep -E "tok/s"
echo "=== done $(date +%T)"
