#!/usr/bin/env bash
# Session call 4: the 9.9B model of bench/pipeline_bench.sh BIG=1 (48 layers, d_model 4096, which
# does not fit one H200) at tensor = 2 with sequence parallelism.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deps=$(cd .. && pwd)/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 --target train_gpt >> /tmp/build.log 2>&1 || { grep -E "error|Error" /tmp/build.log | head; exit 1; }
M="--set model.n_layers=48 --set model.d_model=4096 --set model.n_heads=32 --set model.seq_len=1024 --set model.vocab_size=50257 --set data.source=random --set train.micro_batch=1 --set train.global_batch=8 --set train.checkpointing=full --set train.steps=4 --set log.every=1 --set train.precision=bf16 --set train.device=cuda"
echo "=== 9.9B at tensor = 2 + SP $(date +%T)"
timeout 110 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt examples/configs/tiny.toml $M --set parallel.tensor=2 --set parallel.sequence_parallel=true > /tmp/big_t2.log 2>&1; echo "exit $?"
grep -E "^(trellis|memory|tensor|step|done)|rror" /tmp/big_t2.log | cut -c1-300
echo "=== done $(date +%T)"
