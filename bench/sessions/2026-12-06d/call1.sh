#!/usr/bin/env bash
# Session call 1 (one GPU): model.ffn_hidden_size and
# RMSNorm on a GPU, then as much of issue 8's 1.3B round and the MLPs' cost as the call's 590 s
# leave. The whole build; every CUDA test (Parity.RmsNorm new); the PyTorch reference's selftest and
# parity tests (torch_parity_llama new: RMSNorm, rope, SwiGLU at width 88) and export_hf with
# transformers (n_inner 96 new); gpu_e2e (width 90: GELU, and RMSNorm + rope + SwiGLU, new).
# Then GPT-2 1.3B against PyTorch (one round), and Trellis alone at the 1.3B shape: GELU, SwiGLU at
# 4C, SwiGLU at 5504 (~8/3 C), that with RMSNorm (median of the last 10 of 15 steps).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_trellis
echo "=== ctest -L cuda $(date +%T) (${SECONDS}s)"
(cd build && timeout 200 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
grep -E "RmsNorm" "$out/ctest_cuda.log" | head -4
echo "=== torch selftest $(date +%T) (${SECONDS}s)"
timeout 100 python3 bench/torch_gpt.py --selftest 2>&1 | grep -E "rms|F 40|rope:|FAIL|passed|failed" | head -20
echo "=== torch parity, export_hf $(date +%T) (${SECONDS}s)"
(cd build && timeout 150 ctest -R "torch_parity|export_hf" --output-on-failure > "$out/torch_parity.log" 2>&1)
echo "exit $?"; grep -E "worst|transformers|n_inner|tests passed|Failed" "$out/torch_parity.log" | head -16
echo "=== gpu_e2e $(date +%T) (${SECONDS}s)"
timeout 200 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|width 90" "$out/gpu_e2e.log" | head -8
median() {  # the median step ms of the last 10 steps of a train_gpt log
  grep '^step' "$1" | tail -10 | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n |
    awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'
}
echo "=== 1.3B MLPs and norms $(date +%T) (${SECONDS}s)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
for v in gelu:0:layernorm swiglu:0:layernorm swiglu:5504:layernorm swiglu:5504:rmsnorm; do
  (( SECONDS > 520 )) && { echo "out of time"; break; }
  IFS=: read -r mlp ffn norm <<< "$v"
  log="$out/13b_${mlp}_${ffn}_${norm}.log"
  timeout 60 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=15 --set log.every=1 \
    --set model.mlp=$mlp --set model.ffn_hidden_size=$ffn --set model.norm=$norm > "$log" 2>&1
  echo "$v: median of the last 10 steps $(median "$log") ms, $(grep -o 'peak [0-9.]* GiB' "$log" | tail -1)," \
    "$(grep -o '^parameters: [0-9,]*' "$log")"
done
if (( SECONDS < 440 )); then
  echo "=== 1.3B against PyTorch $(date +%T) (${SECONDS}s)"
  timeout $((585 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt \
    --trellis-libs torch --models 1.3b --micro-batch 16 --rounds 1 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
fi
echo "=== done $(date +%T) (${SECONDS}s)"
