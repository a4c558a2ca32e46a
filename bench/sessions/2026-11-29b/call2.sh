#!/usr/bin/env bash
# Session call 2: DP scaling variants, signal-mask diagnosis + preemption, shakespeare wall time.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=$OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export CMAKE_PREFIX_PATH=$PWD/.device-deps/usr LD_LIBRARY_PATH=$PWD/.device-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > $out/build.log 2>&1 && cmake --build build -j32 >> $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "=== signal masks $(date +%T)"
grep -E "SigBlk|SigIgn" /proc/self/status
python3 -c "import subprocess;print(subprocess.run(['grep','-E','SigBlk|SigIgn','/proc/self/status'],capture_output=True,text=True).stdout)"
echo "=== shakespeare wall time (GPU 1, background) $(date +%T)"
(export CUDA_VISIBLE_DEVICES=1; build/prepare_data --input .data/tinyshakespeare.txt --output /tmp/shakespeare --tokenizer char --format llmc >/dev/null
 t0=$SECONDS; build/train_gpt examples/configs/shakespeare_char.toml --set data.path=/tmp/shakespeare.tok --set log.val_batches=16 \
   --set checkpoint.dir=/tmp/sck --set checkpoint.keep_best=true --set checkpoint.resume=none > /tmp/shakes.log 2>&1
 echo "trellis shakespeare wall $((SECONDS - t0)) s" >> /tmp/shakes.log
 build/generate /tmp/sck/best --prompt "ROMEO:" --tokens 250 --temperature 0.8 --top-k 40 --seed 7 >> /tmp/shakes.log 2>&1) &
sh=$!
echo "=== preemption with SIGUSR1 unblocked for mpirun $(date +%T)"
python3 - <<'PY'
import signal, subprocess
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1, signal.SIGTERM])
p = subprocess.run(["ctest", "-R", "preemption", "--output-on-failure"], cwd="build", capture_output=True, text=True)
print("\n".join(l for l in p.stdout.splitlines() if " ok " in l or "FAIL" in l or "Passed" in l or "Failed" in l)[-1500:])
PY
wait $sh; grep -E "step  5000|val loss|best validation|wall" /tmp/shakes.log | tail -8; tail -12 /tmp/shakes.log
dp() { timeout 240 python3 bench/bench_gpt.py --models 350m --micro-batch 16 --data-parallel 2 --steps 20 --warmup 5 --trellis build/train_gpt "$@"; }
echo "=== scaling: Trellis f32 reduce + PyTorch DDP $(date +%T)"
dp --json $out/scaling.json > $out/scaling.log 2>&1; grep -E "^\|" $out/scaling.log | tail -5
echo "=== bf16 reduce $(date +%T)"
dp --skip-torch --trellis-set zero.reduce_dtype=bf16 > /tmp/v1.log 2>&1; grep -E "^\| 350" /tmp/v1.log
for c in 8 16; do echo "=== NCCL_MAX_CTAS=$c $(date +%T)"
  dp --skip-torch --mpirun "mpirun --allow-run-as-root --bind-to none -x NCCL_MAX_CTAS=$c" > /tmp/v$c.log 2>&1; grep -E "^\| 350" /tmp/v$c.log; done
echo "=== bf16 + CTAS 8 $(date +%T)"
dp --skip-torch --trellis-set zero.reduce_dtype=bf16 --mpirun "mpirun --allow-run-as-root --bind-to none -x NCCL_MAX_CTAS=8" > /tmp/v9.log 2>&1; grep -E "^\| 350" /tmp/v9.log
echo "=== done $(date +%T)"
