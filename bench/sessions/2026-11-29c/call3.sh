#!/usr/bin/env bash
# Session call 3: pipeline = 2 for GPT-2 1.3B at m = 32 and a 9.9B model that needs two GPUs
# (bench/pipeline_bench.sh BIG=1); the largest GPT per ZeRO stage at data = 2 (bench/zero_bench.sh
# part 2, one candidate each); the 9.9B model at tensor = 2 with sequence parallelism.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$(cd .. && pwd)/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep -E "error|Error" /tmp/build.log | head; exit 1; }
echo "=== pipeline m=32 and BIG $(date +%T)"
OUT=/tmp/out MS=32 WARMUP=2 STEPS=4 TIMEOUT=90 BIG=1 BIG_TIMEOUT=120 bash bench/pipeline_bench.sh build/train_gpt
echo "=== ZeRO largest $(date +%T)"
OUT=/tmp/out PART=2 TIMEOUT=110 LADDER_0="36:4096" LADDER_1="48:4096" LADDER_2="40:5120" LADDER_3="44:5120" bash bench/zero_bench.sh build/train_gpt
echo "=== BIG at tensor = 2 + SP $(date +%T)"
timeout 100 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt /tmp/out/pipeline/gpt_10b.toml --set parallel.tensor=2 --set parallel.sequence_parallel=true --set train.steps=4 --set log.metrics_file=/tmp/out/big_t2.jsonl > /tmp/out/big_t2.log 2>&1; echo "exit $?"
grep -E "^(trellis|memory|tensor|step|done)|rror" /tmp/out/big_t2.log | cut -c1-300
echo "=== done $(date +%T)"
