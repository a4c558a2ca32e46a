#!/usr/bin/env bash
# Session call 3: CUDA tests of the new ops, shakespeare Trellis vs PyTorch in one call, 124M
# regression check after the model refactor, pipeline = 2 smoke run on two GPUs.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=$OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export CMAKE_PREFIX_PATH=$PWD/.device-deps/usr LD_LIBRARY_PATH=$PWD/.device-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head; tail -5 /tmp/build.log; exit 1; }
echo "=== shakespeare Trellis then PyTorch on GPU 1 (background) $(date +%T)"
(export CUDA_VISIBLE_DEVICES=1; build/prepare_data --input .data/tinyshakespeare.txt --output /tmp/shakespeare --tokenizer char --format llmc >/dev/null
 t0=$SECONDS; build/train_gpt examples/configs/shakespeare_char.toml --set data.path=/tmp/shakespeare.tok --set log.val_batches=16 \
   --set checkpoint.dir=/tmp/sck --set checkpoint.keep_best=true --set checkpoint.resume=none --set log.metrics_file=/tmp/shakes.jsonl
 echo "TRELLIS WALL $((SECONDS - t0)) s"
 python3 bench/shakespeare_torch.py --data /tmp/shakespeare.tok --steps 5000 --device cuda --compile --out /tmp/st.json) > /tmp/shakes.log 2>&1 &
sh=$!
echo "=== cuda tests on GPU 0 $(date +%T)"
(cd build && CUDA_VISIBLE_DEVICES=0 timeout 240 ctest -j6 -L cuda > /tmp/ctest.log 2>&1); grep -E "tests passed|\(Failed\)|Timeout" /tmp/ctest.log
echo "=== 124M Trellis on GPU 0 $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 bench/bench_gpt.py --models 124m --micro-batch 32 --steps 15 --warmup 5 --skip-torch --trellis build/train_gpt > /tmp/b124.log 2>&1; grep -E "^\| 124" /tmp/b124.log
wait $sh
grep -E "val loss|TRELLIS WALL|best validation|RESULT" /tmp/shakes.log | tail -16
echo "=== pipeline smoke: tiny GPT 4 layers, pipeline 1 vs 2 on GPUs $(date +%T)"
for p in 1 2; do timeout 120 mpirun --allow-run-as-root --bind-to none -np $p -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt examples/configs/tiny.toml \
  --set parallel.pipeline=$p --set train.steps=10 --set train.global_batch=16 --set train.micro_batch=4 --set log.every=1 --set train.precision=fp32 2>&1 | grep -E "^step +(1|5|10)/|error|pipeline" | head -6; done
echo "=== done $(date +%T)"
