#!/usr/bin/env bash
# The GPU checks of a session, in up to three calls on a 2-GPU machine (logs to $OUT or ./gpu-out):
#   bench/gpu_session.sh tests   build; every test (CUDA parity, NCCL comm on 2 GPUs); NCCL bus
#                                bandwidth; GPT-2 124M vs PyTorch on GPU 0 while tinyshakespeare
#                                (Trellis, then the PyTorch reference) trains on GPU 1
#   bench/gpu_session.sh scaling data-parallel scaling, 1 vs 2 GPUs, Trellis and PyTorch DDP
#   bench/gpu_session.sh pipeline  GPT-2 1.3B, pipeline 2 (1f1b, interleaved v = 2) at m = 8, 16, 32
#                                against pipeline 1 and the bubble formula (bench/pipeline_bench.sh)
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
     --set data.path=.data/shakespeare.tok --set log.metrics_file="$out/shakespeare.jsonl" --set log.val_batches=16 \
     --set checkpoint.dir=/tmp/shakespeare_ckpt.$$ --set checkpoint.keep_best=true --set checkpoint.resume=none
   echo "trellis wall $((SECONDS - t0)) s"
   build/generate /tmp/shakespeare_ckpt.$$/best --prompt "ROMEO:" --tokens 300 --temperature 0.8 --top-k 40 --seed 7
   python3 bench/shakespeare_torch.py --data .data/shakespeare.tok --steps 5000 --device cuda --compile \
     --out "$out/shakespeare_torch.json") > "$out/shakespeare.log" 2>&1 &
  shakes=$!
  stage "bench 124m on GPU 0"
  CUDA_VISIBLE_DEVICES=0 timeout 400 python3 bench/bench_gpt.py --models 124m --micro-batch 32 --steps 15 --warmup 5 --skip-torch \
    --trellis build/train_gpt --out "$out/bench124.md" --json "$out/bench124.json" > "$out/bench124.log" 2>&1
  tail -6 "$out/bench124.log"
  CUDA_VISIBLE_DEVICES=0 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true > "$out/profile124.log" 2>&1
  grep -A12 "per-op" "$out/profile124.log"
  stage ctest
  (cd build && timeout 300 ctest -j8 -L "cuda|mpi" --output-on-failure > "$out/ctest.log" 2>&1); echo "ctest rc=$?"
  (cd build && timeout 200 ctest -R torch_parity --output-on-failure >> "$out/ctest.log" 2>&1); echo "torch_parity rc=$?"
  (cd build && ctest -R preemption -V > "$out/preemption.log" 2>&1); echo "preemption rc=$?"
  grep -E "tests passed|tests failed|\(Failed\)|Timeout" "$out/ctest.log" | head -20
  stage nccl
  timeout 60 mpirun -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/tests/comm_test \
    --gtest_filter='NcclBandwidth.*' 2>&1 | grep -E "NCCL|PASS|FAIL" | head -5
  stage "wait for shakespeare"
  wait $shakes
  grep -E "step +(1|5000)/|val loss|trellis wall|error" "$out/shakespeare.log" | tail -6
  tail -3 "$out/shakespeare.log"
elif [[ $1 == pipeline ]]; then
  stage "pipeline parallelism (bench/pipeline_bench.sh)"
  OUT=$out bench/pipeline_bench.sh build/train_gpt
else
  # Trellis (f32 reduction) and PyTorch DDP, then Trellis variants that change what the gradient
  # all-reduce costs the overlapped backward: bf16 reduction (half the bytes), fewer NCCL CTAs
  # (fewer SMs taken from the GEMMs; only where the sums take NCCL, not the peer copies),
  # other bucket sizes.
  stage "data-parallel scaling"
  dp() { timeout 300 python3 bench/bench_gpt.py --models 350m --micro-batch 16 --data-parallel 2 --steps 20 \
           --warmup 5 --trellis build/train_gpt "$@"; }
  dp --out "$out/scaling.md" --json "$out/scaling.json" > "$out/scaling.log" 2>&1
  tail -12 "$out/scaling.log"
  stage "variant: zero.reduce_dtype=bf16"
  dp --skip-torch --trellis-set zero.reduce_dtype=bf16 --json "$out/scaling_bf16.json" > "$out/scaling_bf16.log" 2>&1
  tail -6 "$out/scaling_bf16.log"
  for ctas in 4 8 16; do
    stage "variant: NCCL_MAX_CTAS=$ctas"
    dp --skip-torch --mpirun "mpirun --allow-run-as-root --bind-to none -x NCCL_MAX_CTAS=$ctas" \
      --json "$out/scaling_ctas$ctas.json" > "$out/scaling_ctas$ctas.log" 2>&1
    tail -4 "$out/scaling_ctas$ctas.log"
  done
  stage "variant: bf16 + NCCL_MAX_CTAS=8 + 100 MiB buckets"
  dp --skip-torch --trellis-set zero.reduce_dtype=bf16 --trellis-set zero.bucket_mb=100 \
    --mpirun "mpirun --allow-run-as-root --bind-to none -x NCCL_MAX_CTAS=8" \
    --json "$out/scaling_combo.json" > "$out/scaling_combo.log" 2>&1
  tail -4 "$out/scaling_combo.log"
fi
stage done
