#!/usr/bin/env bash
# Session call 2 (2×H200): cuDNN fused attention. Build (with the cuDNN frontend headers carried in
# third_party/), the CUDA parity tests, per-op profiles of 124M (with and without cuDNN attention),
# 350M and 1.3B with the first step left out, a short GPU check of ZeRO stages 1 and 3 and tensor = 2
# with sequence parallelism against one GPU, and 124M against PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(cd .. && pwd)
deps=$root/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$root/third_party" third_party
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"; grep -E "define CUDNN_(MAJOR|MINOR)" /usr/local/cuda/include/cudnn_version.h /usr/include/cudnn_version.h 2>/dev/null
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -20; exit 1; }
grep -E "cuDNN attention" "$out/build.log"
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -30
prof() {  # name, then --set overrides on bench/profile_124m.toml
  local name=$1; shift
  echo "=== profile $name $(date +%T)"
  timeout 120 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true "$@" > "$out/profile_$name.log" 2>&1
  echo "exit $?"; grep -E "^step" "$out/profile_$name.log" | tail -2 | cut -c1-200
  sed -n '/per-op device time/,$p' "$out/profile_$name.log" | head -40
}
export CUDA_VISIBLE_DEVICES=0
prof 124m --set train.steps=8
TRELLIS_CUDNN_ATTENTION=0 prof 124m_own_attention --set train.steps=8
prof 350m --set train.steps=8 --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=1024 --set train.micro_batch=16
prof 1.3b --set train.steps=6 --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=2048 --set train.micro_batch=16
unset CUDA_VISIBLE_DEVICES
echo "=== 2-GPU layouts vs one GPU $(date +%T)"
T="examples/configs/tiny.toml --set train.precision=bf16 --set train.device=cuda --set train.steps=40 --set log.every=40 --set train.global_batch=16"
timeout 60 build/train_gpt $T 2>&1 | grep -E "^step +40" | sed 's/^/one GPU:   /'
for L in "zero.stage=1" "zero.stage=3" "parallel.tensor=2 --set parallel.sequence_parallel=true --set zero.stage=1"; do
  timeout 90 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt $T --set $L \
    > "$out/layout.log" 2>&1; echo "exit $? ($L)"; grep -E "^step +40|rror" "$out/layout.log" | head -3
done
echo "=== bench 124m $(date +%T)"
timeout 240 python3 bench/bench_gpt.py --models 124m --micro-batch 32 --steps 15 --warmup 5 --trellis build/train_gpt \
  --out "$out/bench.md" 2>&1 | grep -E "tok/s|\|"
echo "=== done $(date +%T)"
