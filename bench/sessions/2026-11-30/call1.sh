#!/usr/bin/env bash
# Session call 1 (2×H200): the CUDA tests of the commits since the last GPU run (bench/gpu_check.sh,
# which ends with the 124M benchmark against PyTorch), the per-op profiles of 124M / 350M / 1.3B
# on one GPU (log.profile_ops: CUDA events, matmuls per shape), and the largest GPT at ZeRO stage 2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$(cd .. && pwd)/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
ln -sfn "$deps" .device-deps 2>/dev/null || true
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
OUT=$out bash bench/gpu_check.sh 124m 32
prof() {  # name, then --set overrides on bench/profile_124m.toml
  local name=$1; shift
  echo "=== profile $name $(date +%T)"
  CUDA_VISIBLE_DEVICES=0 timeout 120 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true "$@" \
    > "$out/profile_$name.log" 2>&1; echo "exit $?"
  grep -E "^step|peak" "$out/profile_$name.log" | tail -3 | cut -c1-250
  sed -n '/per-op time/,$p' "$out/profile_$name.log" | head -45
}
prof 124m
prof 350m --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=1024 --set train.micro_batch=16
prof 1.3b --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=2048 --set train.micro_batch=16
echo "=== ZeRO stage 2 largest $(date +%T)"
PART=2 LADDER_0=" " LADDER_1=" " LADDER_3=" " LADDER_2="40:5120 36:5120" TIMEOUT=230 OUT=$out bash bench/zero_bench.sh
echo "=== done $(date +%T)"
