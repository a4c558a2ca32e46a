#!/usr/bin/env bash
# Session call 1 (1×H200): the nineteenth session's library report on a GPU for the first time
# (env_report's cuDNN line, train_gpt's `libraries:` log line and start record, on the machine's
# libraries and on PyTorch's wheels); gpu_e2e; bench_gpt 124M and 350M against PyTorch with Trellis
# on PyTorch's cuBLAS/cuDNN (--trellis-libs torch).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt env_report
echo "=== libraries $(date +%T)"
build/env_report > "$out/env_report.log" 2>&1; echo "env_report exit $?"
grep -iE "cudnn|cublas|nccl|runtime" "$out/env_report.log" | head -8
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
wheels="$(dirname "$(find "$sp/nvidia" -name 'libcublasLt.so.13*' | head -1)"):$(dirname "$(find "$sp/nvidia" -name 'libcudnn.so.9*' | head -1)")"
for v in machine wheels; do
  lp=$LD_LIBRARY_PATH; [[ $v == wheels ]] && lp=$wheels:$LD_LIBRARY_PATH
  LD_LIBRARY_PATH=$lp timeout 60 build/train_gpt examples/configs/tiny.toml --set train.steps=3 \
    --set log.metrics_file="$out/tiny_$v.jsonl" > "$out/tiny_$v.log" 2>&1; echo "tiny ($v) exit $?"
  grep -E "^libraries:" "$out/tiny_$v.log"
  python3 -c "import json,sys; print('start record libraries:', json.loads(open(sys.argv[1]).readline()).get('libraries'))" "$out/tiny_$v.jsonl"
done
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; tail -4 "$out/gpu_e2e.log"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch"
echo "=== 124M $(date +%T)"
timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|loaded" "$out/bench_124m.md"
echo "=== 350M $(date +%T)"
timeout 150 $B --models 350m --micro-batch 16 --out "$out/bench_350m.md" > "$out/bench_350m.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_350m.md"
echo "=== done $(date +%T)"
