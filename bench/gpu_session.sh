#!/usr/bin/env bash
# The GPU checks of a session, in two calls on a 2-GPU machine (logs to $OUT or ./gpu-out):
#   bench/gpu_session.sh tests   build; every test (CUDA parity, NCCL comm on 2 GPUs); NCCL bus
#                                bandwidth; GPT-2 124M vs PyTorch on GPU 0 while tinyshakespeare
#                                (Trellis, then the PyTorch reference) trains on GPU 1
#   bench/gpu_session.sh scaling data-parallel scaling, 1 vs 2 GPUs, Trellis and PyTorch DDP
# Needs .device-deps (../shared/device/prepare-deps.sh) and .data/tinyshakespeare.txt carried.
set -uo pipefail
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export CMAKE_PREFIX_PATH=$PWD/.device-deps/usr LD_LIBRARY_PATH=$PWD/.device-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
stage() { echo "=== $1 ($(date +%T))"; }

stage build
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }

if [[ ${1:-tests} == tests ]]; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
  stage "shakespeare on GPU 1 (background)"
  (export CUDA_VISIBLE_DEVICES=1
   build/prepare_data --input .data/tinyshakespeare.txt --output .data/shakespeare --tokenizer char --format llmc
   t0=$SECONDS
   build/train_gpt examples/configs/shakespeare_char.toml \
     --set data.path=.data/shakespeare.tok --set log.metrics_file="$out/shakespeare.jsonl" --set log.val_batches=16
   echo "trellis wall $((SECONDS - t0)) s"
   python3 bench/shakespeare_torch.py --data .data/shakespeare.tok --steps 5000 --device cuda --compile \
     --out "$out/shakespeare_torch.json") > "$out/shakespeare.log" 2>&1 &
  shakes=$!
  stage "bench 124m on GPU 0"
  CUDA_VISIBLE_DEVICES=0 timeout 400 python3 bench/bench_gpt.py --models 124m --micro-batch 32 --steps 15 --warmup 5 \
    --trellis build/train_gpt --out "$out/bench124.md" --json "$out/bench124.json" > "$out/bench124.log" 2>&1
  tail -6 "$out/bench124.log"
  CUDA_VISIBLE_DEVICES=0 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true > "$out/profile124.log" 2>&1
  grep -A12 "per-op" "$out/profile124.log"
  stage ctest
  (cd build && timeout 400 ctest -j8 --output-on-failure > "$out/ctest.log" 2>&1); echo "ctest rc=$?"
  grep -E "tests passed|tests failed|\(Failed\)|Timeout" "$out/ctest.log" | head -20
  stage nccl
  timeout 60 mpirun -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/tests/comm_test \
    --gtest_filter='NcclBandwidth.*' 2>&1 | grep -E "NCCL|PASS|FAIL" | head -5
  stage "wait for shakespeare"
  wait $shakes
  grep -E "step +(1|5000)/|val loss|trellis wall|error" "$out/shakespeare.log" | tail -6
  tail -3 "$out/shakespeare.log"
else
  stage "data-parallel scaling"
  timeout 560 python3 bench/bench_gpt.py --models 350m --micro-batch 16 --data-parallel 2 --steps 15 --warmup 5 \
    --trellis build/train_gpt --out "$out/scaling.md" --json "$out/scaling.json" > "$out/scaling.log" 2>&1
  tail -15 "$out/scaling.log"
fi
stage done
